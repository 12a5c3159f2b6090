"""tune_batch's ``max-batch`` beside the ``lightning`` package's own batch-size finder (power and
binsearch), same model, data, first batch size and memory limit.

tune_batch's probe is a short real training run (one warm-up step, two measured steps) whose
warm-up step runs under torch's memory profiler; its peak tensor bytes are held against
``cap x (1 - resources.memory_margin)``. Lightning's finder is the installed package's
``Tuner.scale_batch_size`` (``init_val`` = the space's smallest batch size,
``steps_per_trial=3`` to match the probe's three steps, its own batch-size ``margin`` set to 0).
On a CPU nothing runs out of memory, so the LightningModule (manual optimization: zero_grad,
forward, backward and optimizer step inside ``training_step``) measures every step with the
same profiler and raises ``torch.OutOfMemoryError("CUDA out of memory ...")``, which Lightning's
``is_oom_error`` accepts, when the step's peak passes the same limit. tune_batch's step draws
its batch from the loader under the profiler, so its peak includes the in-memory training set the
batch is gathered from; the Lightning loader yields indices and the step gathers the samples
under the profiler too. Both tools thus search against one limit, measured one way (the script
prints how far the two readings differ at the sizes both probed).

Then both answers' headroom is measured with the same 20-step run (peak / cap), and the memory
line max-batch fitted is checked on batch sizes it was not fitted on (probed for real).

Needs ``pip install lightning`` (exit 2 without it).

Usage: python scripts/bench_max_batch.py [--cap 48MiB] [--repeats 3] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

try:
    import lightning.pytorch as pl
except ImportError:
    print("bench_max_batch: the lightning package is not installed: pip install lightning", file=sys.stderr)
    raise SystemExit(2) from None

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_batch.config import Config, load_config, parse_memory  # noqa: E402
from tune_batch.measure.memory import step_peak_bytes  # noqa: E402
from tune_batch.pipeline.max_batch import MaxBatchResult, Probe, max_batch, probe_trial  # noqa: E402
from tune_batch.trial import run_trial  # noqa: E402
from tune_batch.trial.loop import make_optimizer  # noqa: E402
from tune_batch.workload import build_datasets, build_model  # noqa: E402

MiB = 2**20


def cap_error(peak: float, limit: float) -> torch.OutOfMemoryError:
    """The out-of-memory error a step over the limit raises: one argument containing "CUDA" and
    "out of memory", which is what lightning's ``is_oom_error`` looks for (checked in ``main``)."""
    return torch.OutOfMemoryError(f"CUDA out of memory (emulated on CPU by bench_max_batch): step peak "
                                  f"{peak / MiB:.1f} MiB over the limit {limit / MiB:.1f} MiB")


class CappedModule(pl.LightningModule):
    """The config's model, trained as tune_batch trains it (cross-entropy, the config's optimizer
    at ``space.lr.low``), every step measured and held against ``limit_bytes``."""

    def __init__(self, config: Config, limit_bytes: float) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.config = config
        self.limit_bytes = limit_bytes
        self.net = build_model(config.model)
        self.loss_fn = nn.CrossEntropyLoss()
        self.steps: list[tuple[int, int]] = []  # (batch size, peak tensor bytes) of every step run

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return make_optimizer(self.config, self.parameters(), self.config.space.lr.low)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        opt = self.optimizers()
        train = self.trainer.datamodule.train

        def step() -> None:
            x, y = train[batch]  # the samples are gathered inside the measured step, as tune_batch's probe does
            opt.zero_grad(set_to_none=True)
            self.manual_backward(self.loss_fn(self.net(x), y))
            opt.step()

        peak = step_peak_bytes(step)
        self.steps.append((len(batch), peak))
        if peak > self.limit_bytes:
            raise cap_error(peak, self.limit_bytes)


class TrainData(pl.LightningDataModule):
    """The config's training set, in tune_batch's order (shuffled, seeded, full batches). The
    loader yields sample indices; the module gathers the samples inside its measured step, so
    that the tensors the gather touches (for an in-memory set, the set itself) count as they do
    in tune_batch's probe, whose step draws its batch from the loader under the profiler."""

    def __init__(self, config: Config, batch_size: int) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.config = config
        self.train = build_datasets(config.data, num_classes=config.model.num_classes, seed=config.search.seed).train

    def train_dataloader(self) -> DataLoader:
        return DataLoader(torch.arange(len(self.train)), batch_size=self.batch_size, shuffle=True, drop_last=True,
                          num_workers=self.config.data.num_workers,
                          generator=torch.Generator().manual_seed(self.config.search.seed))


@dataclass
class FinderRun:
    batch: int
    trials: list[tuple[int, int, bool]]  # (batch size, largest step peak, fitted the limit) per trial
    steps: int
    seconds: float
    peaks: dict[int, int] = field(default_factory=dict)  # batch size -> its first step's peak


def lightning_finder(config: Config, limit: float, mode: str, init_val: int) -> FinderRun:
    """One run of lightning's own ``Tuner.scale_batch_size`` against ``limit`` (fresh model)."""
    from lightning.pytorch.tuner import Tuner

    model = CappedModule(config, limit)
    data = TrainData(config, init_val)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_max_batch_") as root:
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
        batch = Tuner(trainer).scale_batch_size(model, datamodule=data, mode=mode, init_val=init_val,
                                                steps_per_trial=3, margin=0.0)
    seconds = time.perf_counter() - t0
    trials: list[tuple[int, int, bool]] = []
    peaks: dict[int, int] = {}
    for size, peak in model.steps:  # a trial is a run of steps at one size (sizes never repeat back to back)
        peaks.setdefault(size, peak)
        if trials and trials[-1][0] == size:
            trials[-1] = (size, max(trials[-1][1], peak), max(trials[-1][1], peak) <= limit)
        else:
            trials.append((size, peak, peak <= limit))
    return FinderRun(int(batch or 0), trials, len(model.steps), seconds, peaks)


def heldout_sizes(result: MaxBatchResult) -> list[int]:
    """Batch sizes the line was not fitted on: halfway between consecutive fitted sizes, and the
    largest size the line predicts under the limit (where the answer is decided)."""
    fitted = sorted({p.batch_size for p in result.probes if p.status == "ok" and p.peak_mem_bytes is not None
                     and p.peak_mem_bytes <= result.limit_bytes})
    sizes = [(a + b) // 2 for a, b in zip(fitted, fitted[1:]) if b - a > 1]
    fit = result.fit
    if fit is not None and fit.slope_bytes > 0:
        edge = int((result.limit_bytes - fit.intercept_bytes) / fit.slope_bytes)
        if edge > 0 and edge not in fitted:
            sizes.append(edge)
    return sizes


def heldout_error(result: MaxBatchResult, probe) -> tuple[float, list[str]]:
    """Largest |predicted - measured| / measured over the held-out sizes, probed for real."""
    if result.fit is None:
        return float("nan"), ["no memory line (fewer than two sizes fitted)"]
    errs, notes = [], []
    for b in heldout_sizes(result):
        p: Probe = probe(b)
        pred = result.fit.predict(b)
        if p.peak_mem_bytes is None:
            notes.append(f"{b}: predicted {pred / MiB:.1f} MiB, probe {p.status} (no peak)")
            continue
        errs.append(abs(pred - p.peak_mem_bytes) / p.peak_mem_bytes)
        notes.append(f"{b}: predicted {pred / MiB:.2f} MiB, measured {p.peak_mem_bytes / MiB:.2f} MiB ({errs[-1]:.2%})")
    return (max(errs) if errs else float("nan")), notes


def lightning_points_error(result: MaxBatchResult, runs: list[FinderRun]) -> tuple[float, int]:
    """The line against the peaks lightning's trials measured at sizes the line was not fitted on."""
    if result.fit is None:
        return float("nan"), 0
    fitted = {p.batch_size for p in result.probes}
    errs = [abs(result.fit.predict(b) - peak) / peak for r in runs for b, peak in r.peaks.items() if b not in fitted]
    return (max(errs) if errs else float("nan")), len(errs)


def long_check(config: Config, batch: int) -> tuple[str, float | None]:
    """A 20-step run at ``batch`` under the enforced cap: (status, peak bytes)."""
    budget = config.budget.model_copy(update={"train_samples": 20 * batch, "warmup_steps": 2})
    res = run_trial(config.model_copy(update={"budget": budget}),
                    {"batch_size": batch, "lr": config.space.lr.low, "num_gpus": 1}, validate=False)
    return res.status.value, res.metrics.peak_mem_bytes


def agreement(ours: MaxBatchResult, runs: list[FinderRun]) -> float:
    """Largest relative gap between the two tools' peaks at the sizes both probed (the same
    measurement, so it should be near 0)."""
    gaps = [abs(r.peaks[p.batch_size] - p.peak_mem_bytes) / p.peak_mem_bytes
            for r in runs for p in ours.probes if p.batch_size in r.peaks and p.peak_mem_bytes]
    return max(gaps) if gaps else float("nan")


def trials_text(trials: list[tuple[int, int, bool]]) -> str:
    return ", ".join(f"{b}{'' if ok else '!'}" for b, _, ok in trials)


def one_repeat(config: Config, cap: int, limit: float, init_val: int, probe) -> dict[str, float]:
    t0 = time.perf_counter()
    ours = max_batch(config, 1, probe)
    t_ours = time.perf_counter() - t0
    power = lightning_finder(config, limit, "power", init_val)
    binsearch = lightning_finder(config, limit, "binsearch", init_val)
    checks: dict[int, tuple[str, float | None]] = {}
    for b in {ours.batch_size or 0, power.batch, binsearch.batch} - {0}:
        checks[b] = long_check(config, b)
    err, notes = heldout_error(ours, probe)

    def room(b: int | None) -> str:
        if not b or b not in checks:
            return "-"
        status, peak = checks[b]
        return f"{status}, peak {peak / MiB:.1f} MiB = {peak / cap:.0%} of cap" if peak else status

    print("  (20-step run: tune_batch's trial under the cap; its peak is that of its profiled warm-up step)")
    print(f"  tune_batch max-batch: {ours.batch_size} in {len(ours.probes)} probes "
          f"[{', '.join(str(p.batch_size) for p in ours.probes)}] "
          f"({t_ours:.1f} s); 20-step run at {ours.batch_size}: {room(ours.batch_size)}")
    for name, r in (("power", power), ("binsearch", binsearch)):
        print(f"  lightning {name}: {r.batch} in {len(r.trials)} trials / {r.steps} steps [{trials_text(r.trials)}] "
              f"({r.seconds:.1f} s); 20-step run at {r.batch}: {room(r.batch)}")
    print(f"  held-out sizes (line fitted on {ours.fit.n_points if ours.fit else 0} points): {'; '.join(notes)}")
    l_err, n = lightning_points_error(ours, [power, binsearch])
    print(f"  same sizes, both tools' peaks differ by at most {agreement(ours, [power, binsearch]):.1%}; "
          f"the line against lightning's {n} peaks at sizes it was not fitted on: max error {l_err:.2%}")
    peak_ours = checks.get(ours.batch_size or 0, ("", None))[1]
    peak_bin = checks.get(binsearch.batch, ("", None))[1]
    return {"probes": len(ours.probes), "power_probes": len(power.trials), "bin_probes": len(binsearch.trials),
            "power_steps": power.steps, "bin_steps": binsearch.steps, "batch": ours.batch_size or 0,
            "power_batch": power.batch, "bin_batch": binsearch.batch,
            "fits": int(checks.get(ours.batch_size or 0, ("none",))[0] == "ok"),
            "bin_fits": int(checks.get(binsearch.batch, ("none",))[0] == "ok"),
            "room": 1 - peak_ours / cap if peak_ours else float("nan"),
            "bin_room": 1 - peak_bin / cap if peak_bin else float("nan"),
            "err": err, "t_ours": t_ours, "t_power": power.seconds, "t_bin": binsearch.seconds}


def spread(rows: list[dict[str, float]], key: str, fmt: str = "g") -> str:
    vals = [r[key] for r in rows]
    med, lo, hi = (f"{v:{fmt}}" for v in (statistics.median(vals), min(vals), max(vals)))
    return med if lo == hi else f"{med} ({lo}-{hi})"


def summarise(rows: list[dict[str, float]]) -> None:
    def med(k: str) -> float:
        return statistics.median(r[k] for r in rows)

    print(f"medians over {len(rows)} repeats (min-max where they differ):")
    print(f"  probes: tune_batch {spread(rows, 'probes')}, lightning power {spread(rows, 'power_probes')} "
          f"({spread(rows, 'power_steps')} steps), lightning binsearch {spread(rows, 'bin_probes')} "
          f"({spread(rows, 'bin_steps')} steps)")
    print(f"  batch: tune_batch {spread(rows, 'batch')}, lightning power {spread(rows, 'power_batch')}, "
          f"lightning binsearch {spread(rows, 'bin_batch')}")
    print(f"  headroom below the cap in the 20-step run: tune_batch {spread(rows, 'room', '.1%')}, "
          f"lightning binsearch {spread(rows, 'bin_room', '.1%')}")
    print(f"  held-out prediction error of the memory line (max per repeat): {spread(rows, 'err', '.2%')}")
    print(f"  seconds, tune_batch / power / binsearch (indicative: lightning profiles all 3 steps of a trial, "
          f"tune_batch 1 of 3 but builds model, data and a priming step per probe): "
          f"{spread(rows, 't_ours', '.1f')} / {spread(rows, 't_power', '.1f')} / {spread(rows, 't_bin', '.1f')}")
    fits = int(all(r["fits"] for r in rows))
    print(f"RESULT probes={med('probes'):g} lightning_power_probes={med('power_probes'):g} "
          f"lightning_binsearch_probes={med('bin_probes'):g} batch={med('batch'):g} "
          f"lightning_batch={med('bin_batch'):g} "
          f"fits={fits} pred_err_heldout={med('err'):.3f} lightning_power_batch={med('power_batch'):g} "
          f"lightning_fits={int(all(r['bin_fits'] for r in rows))} headroom={med('room'):.3f} "
          f"lightning_headroom={med('bin_room'):.3f}")


CAVEATS = (
    "what this CPU comparison cannot show: no allocator runs out of memory here, both tools see a cap "
    "emulated on the profiler's tensor bytes (a GPU adds allocator fragmentation, cuDNN workspaces and "
    "the CUDA context, and would not hold the training set, which both peaks include here, so the batch sizes "
    "do not carry over, the probe counts do); binsearch answers any "
    "integer, max-batch and power only the space's powers of two; lightning's trials reuse one model and "
    "optimizer (momentum already allocated after the first trial), tune_batch builds both per probe."
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs/quickstart.yaml"))
    ap.add_argument("--cap", default="48MiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    from lightning.pytorch.utilities.memory import is_oom_error

    if not is_oom_error(cap_error(2.0, 1.0)):
        print("bench_max_batch: this lightning version does not take the emulated OOM for one; no fair run possible")
        raise SystemExit(2)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="lightning")
    cfg = load_config(args.config, [f"resources.device_memory={args.cap}", *args.overrides])
    cap = int(parse_memory(cfg.resources.device_memory)[1])
    limit = cap * (1.0 - cfg.resources.memory_margin)
    init_val = min(cfg.space.batch_choices())
    train = build_datasets(cfg.data, num_classes=cfg.model.num_classes, seed=cfg.search.seed).train
    n_train = len(train)
    set_mib = sum(t.nbytes for t in getattr(train, "tensors", ())) / MiB
    print(f"lightning {pl.__version__}; model {cfg.model.name} {cfg.model.kwargs}, data {cfg.data.name} at "
          f"{cfg.data.resize} px ({n_train} train, {set_mib:.1f} MiB of tensors, inside every peak); "
          f"cap {cap / MiB:.0f} MiB, margin {cfg.resources.memory_margin:.0%}: "
          f"both tools search against {limit / MiB:.1f} MiB; lightning init_val {init_val}, steps_per_trial 3, "
          f"margin 0; over the limit a step raises {type(cap_error(2, 1)).__name__}, lightning's is_oom_error: "
          f"yes; {args.repeats} repeats; '!' marks a trial over the limit")
    probe = probe_trial(cfg)
    rows = []
    for rep in range(args.repeats):
        print(f"repeat {rep + 1}:")
        rows.append(one_repeat(cfg, cap, limit, init_val, probe))
    print(CAVEATS)
    summarise(rows)


if __name__ == "__main__":
    main()
