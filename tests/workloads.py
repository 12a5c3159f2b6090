"""Workloads used by the tests through ``pkg.module:function`` entries (real code paths)."""

from __future__ import annotations

import torch
from torch import nn

from tune_batch.workload.models import small_cnn


class _OomAbove(nn.Module):
    """A real small CNN that raises torch.OutOfMemoryError, as the CUDA allocator does, when a
    batch is larger than ``limit``: the OOM path of a GPU, on a CPU."""

    def __init__(self, num_classes: int, limit: int) -> None:
        super().__init__()
        self.net = small_cnn(num_classes, width=8)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} samples "
                                         f"(test limit {self.limit})")
        return self.net(x)


def oom_above(num_classes: int = 10, limit: int = 32) -> nn.Module:
    return _OomAbove(num_classes, limit)


def raising_model(num_classes: int = 10) -> nn.Module:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(1, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom from the user's model")

    return Boom()


def not_a_model(num_classes: int = 10) -> str:
    return "not a module"


NOT_CALLABLE = 42


def tiny_with_dropout(num_classes: int = 10, width: int = 8, dropout: float = 0.0) -> nn.Module:
    """small_cnn with a dropout before the head: a user hyperparameter for extra_space tests."""
    net = small_cnn(num_classes, width=width)
    head = net[-1]
    net[-1] = nn.Sequential(nn.Dropout(dropout), head)
    net.dropout_p = dropout  # visible to tests
    return net


def one_matmul(num_classes: int = 10, in_features: int = 768, hidden: int = 4096) -> nn.Module:
    """A model that is one large matmul (plus a tiny head), for the MFU check."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden, bias=False),
                         nn.Linear(hidden, num_classes, bias=False))


class _SlowData(torch.utils.data.Dataset):
    def __init__(self, n: int, delay_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 16, 16, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        import time

        time.sleep(self.delay_s)  # a slow decoder: the input pipeline, not the model, sets the pace
        return self.x[i], self.y[i]


def slow_data(n: int = 512, delay_s: float = 0.002):
    return _SlowData(n, delay_s), _SlowData(64, 0.0)


class _OomOnRank(nn.Module):
    def __init__(self, num_classes: int, rank: int, hang_batch: int | None = None) -> None:
        super().__init__()
        self.net = small_cnn(num_classes, width=8)
        self.rank = rank
        self.hang_batch = hang_batch
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        import torch.distributed as dist

        self.calls += 1
        if dist.is_initialized() and dist.get_rank() == self.rank and self.calls > 4:
            if x.shape[0] == self.hang_batch:
                time.sleep(3600)  # hung for good: the other rank waits in its next collective
            raise torch.OutOfMemoryError(f"CUDA out of memory (test: rank {self.rank} only)")
        return self.net(x)


def oom_on_rank(num_classes: int = 10, rank: int = 1, hang_batch: int | None = None) -> nn.Module:
    """Runs out of memory on one rank only, after a few steps: the others must not hang. With
    ``hang_batch``, a worker batch of that size hangs on that rank instead."""
    return _OomOnRank(num_classes, rank, hang_batch)


class _Faulty(nn.Module):
    """A different real fault for each batch size (the fault-injection search):
    16 raises, 32 gives a NaN loss, 64 runs out of memory, 128 is slow past the timeout,
    96 hangs for good, 256 kills its own process with SIGKILL; anything else trains normally."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = small_cnn(num_classes, width=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import os
        import signal
        import time

        b = x.shape[0]
        if b == 16:
            raise RuntimeError("injected fault: the model raised")
        if b == 32:
            return self.net(x) * float("nan")
        if b == 64:
            raise torch.OutOfMemoryError("CUDA out of memory. (injected)")
        if b == 128:
            time.sleep(1.5)  # slow: the trial's own deadline check stops it between steps
        if b == 96:
            time.sleep(3600)  # hung: never returns; the watchdog must stop it
        if b == 256:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.net(x)


def faulty(num_classes: int = 10) -> nn.Module:
    return _Faulty(num_classes)


class _DyingLoaderData(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 16, 16, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        import os

        info = torch.utils.data.get_worker_info()
        if info is not None and i % 7 == 3:
            os._exit(1)  # the loader worker process dies without a word
        return self.x[i], self.y[i]


def dying_loader(n: int = 512):
    return _DyingLoaderData(n), _DyingLoaderData(64)


def builder_raises(num_classes: int = 10, **kwargs: object) -> nn.Module:
    """A user's model builder that fails while building (not in forward)."""
    raise RuntimeError("the user's builder could not find its weights file")


def swaps_records_away(num_classes: int = 10, run_dir: str = "") -> nn.Module:
    """A model builder that, once the run's trials.jsonl holds a record, moves it aside and puts
    a directory in its place: the next append fails mid-search, as on a full or broken disk."""
    from pathlib import Path

    p = Path(run_dir) / "trials.jsonl"
    if p.is_file() and p.read_text().strip():
        p.rename(p.with_name("trials.jsonl.kept"))
        p.mkdir()
    return tiny_with_dropout(num_classes)


class _Leaky(nn.Module):
    """small_cnn that keeps a copy of ``kib_per_step`` KiB of its input in a list at every
    training forward: the classic leak of a tensor kept "for logging"."""

    def __init__(self, num_classes: int, kib_per_step: int) -> None:
        super().__init__()
        self.net = small_cnn(num_classes, width=8)
        self.kib_per_step = kib_per_step
        self.kept: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.kept.append(x.detach().flatten().repeat(1 + self.kib_per_step * 256 // x.numel())
                             [: self.kib_per_step * 256].clone())
        return self.net(x)


def leaky(num_classes: int = 10, kib_per_step: int = 64) -> nn.Module:
    return _Leaky(num_classes, kib_per_step)


def larger_images(batch_size: int, dataset: object, side: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    """``data.worst_case``: a batch of larger images than the data set's (a detection set's largest)."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch_size, 3, side, side, generator=g), torch.zeros(batch_size, dtype=torch.long)


def one_image_short(batch_size: int, dataset: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A wrong ``data.worst_case``: one sample fewer than the batch."""
    return larger_images(batch_size - 1, dataset, side=16)


def eval_not_a_dict(model, loader, device):
    """A ``train.evaluate`` with a mistake every trial meets: it returns a list."""
    return [0.0]


def eval_accuracy_only(model, loader, device):
    """A ``train.evaluate`` returning its accuracy under a name no objective gives."""
    hits = total = 0
    for x, y in loader:
        hits += int((model(x.to(device)).argmax(dim=1).cpu() == y).sum())
        total += len(y)
    return {"accuracy": hits / max(total, 1)}


def eval_not_a_dict_on_the_whole_set(model, loader, device):
    """A ``train.evaluate`` with a mistake every trial meets that the 2-sample evaluation before a
    search does not: it returns a list once the validation set is larger than that."""
    return [0.0] if len(loader.dataset) > 2 else {"val_loss": 1.0}


def per_sample_loss(model, batch, device):
    """A ``train.step`` that forgot the reduction: one loss per sample, not the batch's."""
    x, y = batch
    return nn.functional.cross_entropy(model(x.to(device)), y.to(device), reduction="none")


class _DictBatches(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": torch.full((3, 16, 16), i / 64), "y": torch.tensor(i % 10)}


def dict_batches():
    """Samples as dicts: the built-in loss and evaluation cannot read them."""
    return _DictBatches(), _DictBatches()


def dict_step(model, batch, device):
    return nn.functional.cross_entropy(model(batch["x"].to(device)), batch["y"].to(device))


def eval_needs_eight(model, loader, device):
    """A ``train.evaluate`` that cannot score fewer than 8 samples (as an AUC needs both classes):
    valid, though a 2-sample check would call it broken."""
    if len(loader.dataset) < 8:
        raise ValueError("needs at least 8 samples")
    return {"val_loss": 1.0}


def step_needs_eight(model, batch, device):
    """A ``train.step`` that cannot take fewer than 8 samples (in-batch groups of 8, say)."""
    x, y = batch
    if len(y) < 8:
        raise ValueError("needs at least 8 samples")
    return nn.functional.cross_entropy(model(x.to(device)), y.to(device))


class _OneUnreadable(torch.utils.data.Dataset):
    """64 samples of which one (index 9) cannot be read, as a corrupt file in a folder."""

    def __init__(self, bad: int | None) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y, self.bad = torch.randn(64, 3, 16, 16, generator=g), torch.arange(64) % 10, bad

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        if i == self.bad:
            raise OSError(f"cannot read sample {i}: the file is corrupt")
        return self.x[i], self.y[i]


def one_unreadable_sample():
    """A training set whose every pass meets one unreadable sample (past the first two)."""
    return _OneUnreadable(9), _OneUnreadable(None)


def slow_to_build(delay_s: float = 60.0, started: str = ""):
    """A data builder that takes ``delay_s`` (a large data set loading): a Ctrl-C meets it. It
    writes the file ``started`` names once it is loading."""
    import pathlib
    import time

    if started:
        pathlib.Path(started).write_text("loading")
    time.sleep(delay_s)
    return _DictBatches(), _DictBatches()


def pid_then_wait(loop_config: dict, rank: object) -> None:
    """A worker group's loop that writes its process id to ``loop_config["dir"]`` and then waits
    for good (a rank still running when its trial's process is ended)."""
    import os
    import time
    from pathlib import Path

    Path(loop_config["dir"], f"{rank.rank}.pid").write_text(str(os.getpid()))  # type: ignore[attr-defined]
    time.sleep(3600)


#: ``gc.get_freeze_count()`` as each ``freeze_seen`` model was built (read by test_memory_safety)
FREEZE_SEEN: list[int] = []


def freeze_seen(num_classes: int = 10, width: int = 8) -> nn.Module:
    """small_cnn, noting how much of the heap was frozen when the trial built it."""
    import gc

    from tune_batch.workload.models import small_cnn

    FREEZE_SEEN.append(gc.get_freeze_count())
    return small_cnn(num_classes=num_classes, width=width)
