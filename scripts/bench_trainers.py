"""tune_batch beside the trainers' own finders, in the user's own trainer: Lightning's
``Tuner.scale_batch_size`` + ``lr_find`` and Hugging Face's ``auto_find_batch_size`` (with the
example's default learning rate), on the shipped examples (``configs/lightning_cnn.yaml``,
``configs/hf_tiny_gpt2.yaml``), in one process, on the same data.

Each answer (batch size, learning rate) is then trained in the same trainer until the example's
target (Lightning: ``val_acc`` >= ``--target-acc``; HF: ``eval_loss`` <= ``--target-loss``),
validated every ``--eval-every`` samples; time to target is the training wall time before the
first validation that reached it (validation time left out), ``inf`` when it was not reached
within ``--max-samples`` or ``--max-seconds``. Costs: each finder's own wall time (Lightning:
both tuner calls; HF: the attempts its batch-size loop threw away on out-of-memory), and the
tune_batch searches' wall time (``search_cost_s``: both; each apart in the extra keys), run on the
optuna backend so that their trials run in this process as well.

Time to target of one run varies with the seed (up to 2x on digits): ``--seeds`` runs each
answer with several seeds (3), interleaved, and reports the median and the range.
Needs ``pip install "tune-batch[lightning,transformers]"``.

Usage: python scripts/bench_trainers.py [--trials 6] [--seeds 3] [--out DIR]
Ends with: RESULT lightning_finder_tta_s=... tune_batch_lightning_tta_s=... hf_auto_tta_s=...
tune_batch_hf_tta_s=... lightning_finder_cost_s=... hf_auto_cost_s=... search_cost_s=...
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
    import transformers
except ImportError as e:
    print(f"bench_trainers: {e.name} is not installed: pip install 'tune-batch[lightning,transformers]'",
          file=sys.stderr)
    raise SystemExit(2) from None

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_batch.config import load_config  # noqa: E402
from tune_batch.pipeline.search import search  # noqa: E402
from tune_batch.workload.examples import hf_tiny_gpt2, lightning_cnn  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def quiet() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")  # lr_find's own progress bar (this script's process only)
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "transformers", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


# ---------------------------------------------------------------- Lightning


class FinderModule(lightning_cnn.DigitsCNN):
    """The example's module as Lightning's tuner wants it: a ``batch_size`` attribute its own
    ``train_dataloader`` reads (``lr`` is in its hparams, where ``lr_find`` writes)."""

    def __init__(self, batch_size: int, lr: float) -> None:
        super().__init__(width=16, lr=lr)  # (the data sets are set after: hparams would pickle them)
        self.batch_size = batch_size
        self._train: Any = None
        self._val: Any = None

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self._train, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._val, batch_size=256)


def lightning_finder(lo: int, hi: int) -> tuple[int, float, float]:
    """(batch size, lr, the tuner's seconds): scale_batch_size (power, from the space's smallest
    batch, at most its largest), then lr_find's suggestion at that batch size."""
    pl.seed_everything(0, verbose=False)
    pieces = lightning_cnn.build()
    module = FinderModule(lo, pieces["module"].hparams.lr)
    module._train, module._val = pieces["train"], pieces["val"]
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(default_root_dir=root, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="auto", devices=1, max_epochs=1000)
        tuner = pl.tuner.Tuner(trainer)
        t0 = time.perf_counter()
        batch = tuner.scale_batch_size(module, mode="power", init_val=lo, max_val=hi)
        finder = tuner.lr_find(module)
        cost = time.perf_counter() - t0
    lr = finder.suggestion() if finder is not None else None
    return int(batch or lo), float(lr or module.hparams.lr), cost


class ToTarget(pl.Callback):
    """Training seconds (validation left out) until ``val_acc`` first reaches ``target``."""

    def __init__(self, target: float, max_seconds: float) -> None:
        self.target, self.max_seconds = target, max_seconds
        self.tta_s = math.inf
        self.best = 0.0
        self._t0 = self._v0 = 0.0
        self._val_s = 0.0

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_validation_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._v0 = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        acc = float(trainer.callback_metrics.get("val_acc", 0.0))
        self.best = max(self.best, acc)
        train_s = self._v0 - self._t0 - self._val_s
        self._val_s += time.perf_counter() - self._v0
        if acc >= self.target and math.isinf(self.tta_s):
            self.tta_s = train_s
        if not math.isinf(self.tta_s) or train_s > self.max_seconds:
            trainer.should_stop = True


def lightning_tta(batch: int, lr: float, seed: int, args: argparse.Namespace) -> tuple[float, float]:
    """(time to target, best val_acc) of (batch, lr) in the example's Lightning Trainer."""
    pl.seed_everything(seed, verbose=False)
    pieces = lightning_cnn.build()
    module = pieces["module"]
    module.hparams.lr = lr
    g = torch.Generator().manual_seed(seed)
    train = DataLoader(pieces["train"], batch_size=batch, shuffle=True, drop_last=True, generator=g)
    val = DataLoader(pieces["val"], batch_size=256)
    cb = ToTarget(args.target_acc, args.max_seconds)
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(default_root_dir=root, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, devices=1, max_steps=args.max_samples // batch, max_epochs=-1,
                             val_check_interval=max(1, args.eval_every // batch), check_val_every_n_epoch=None,
                             num_sanity_val_steps=0, callbacks=[cb], **pieces["trainer"])
        trainer.fit(module, train_dataloaders=train, val_dataloaders=val)
    return cb.tta_s, cb.best


# ---------------------------------------------------------------- Transformers


class EvalToTarget(transformers.TrainerCallback):
    """Training seconds (evaluation left out) until ``eval_loss`` first is at or below ``target``;
    ``attempts``: when each of the Trainer's training attempts began (auto_find_batch_size retries)."""

    def __init__(self, target: float, max_seconds: float) -> None:
        self.target, self.max_seconds = target, max_seconds
        self.tta_s, self.best = math.inf, math.inf
        self.attempts: list[float] = []
        self._t0 = self._step_end = self._eval_s = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._t0 = self._step_end = time.perf_counter()
        self._eval_s = 0.0
        self.attempts.append(self._t0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._step_end = time.perf_counter()

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kw: Any) -> None:
        loss = float((metrics or {}).get("eval_loss", math.inf))
        self.best = min(self.best, loss)
        train_s = self._step_end - self._t0 - self._eval_s
        self._eval_s += time.perf_counter() - self._step_end
        if loss <= self.target and math.isinf(self.tta_s):
            self.tta_s = train_s
        if not math.isinf(self.tta_s) or train_s > self.max_seconds:
            control.should_training_stop = True


def hf_tta(batch: int | None, lr: float | None, seed: int, args: argparse.Namespace) -> tuple[float, float, float, int]:
    """(time to target, best eval_loss, auto_find's own cost, the batch it trained at) in the
    example's Trainer; ``batch`` / ``lr`` None: the example's defaults with auto_find_batch_size."""
    transformers.set_seed(seed)
    pieces = hf_tiny_gpt2.build()
    settings = dict(pieces["args"])
    if batch is None:
        settings["auto_find_batch_size"] = True
    else:
        settings.update(per_device_train_batch_size=batch, learning_rate=lr)
    per_step = settings.get("per_device_train_batch_size", 8)
    cb = EvalToTarget(args.target_loss, args.max_seconds)
    with tempfile.TemporaryDirectory() as root:
        targs = transformers.TrainingArguments(
            output_dir=root, max_steps=args.max_samples // per_step, eval_strategy="steps",
            eval_steps=max(1, args.eval_every // per_step), save_strategy="no", report_to="none", disable_tqdm=True,
            seed=seed, use_cpu=not torch.cuda.is_available(), **settings)
        trainer = transformers.Trainer(model=pieces["model"], args=targs, train_dataset=pieces["train_dataset"],
                                       eval_dataset=pieces["eval_dataset"], callbacks=[cb])
        trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
        t0 = time.perf_counter()
        trainer.train()
    cost = cb.attempts[-1] - t0 if len(cb.attempts) > 1 else 0.0  # attempts thrown away on out-of-memory
    return cb.tta_s, cb.best, cost, int(getattr(trainer, "_train_batch_size", per_step))


# ---------------------------------------------------------------- the run


def tune_batch_answer(config_name: str, args: argparse.Namespace, out: Path) -> tuple[int, float, float]:
    """(batch size, lr, the search's seconds) recommended by a tune_batch search of the example."""
    # the optuna backend: the trials run in this process too, as the finders do
    overrides = [f"budget.trials={args.trials}", "search.backend=optuna"]
    cfg = load_config(REPO / "configs" / f"{config_name}.yaml", overrides)
    t0 = time.perf_counter()
    result = search(cfg, out / config_name, quiet=True)
    cost = time.perf_counter() - t0
    rec = result.recommended
    if rec is None:
        raise SystemExit(f"bench_trainers: the {config_name} search recommended nothing")
    return rec.params.batch_size, rec.params.lr, cost


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.inf


def spread(values: list[float]) -> str:
    """min-max of the runs' times to target, as one token of the RESULT line."""
    return f"{min(values):.1f}-{max(values):.1f}" if values else "none"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=6, help="budget.trials of each tune_batch search")
    p.add_argument("--seeds", type=int, default=3, help="time-to-target runs per answer (median, min-max)")
    p.add_argument("--target-acc", type=float, default=0.95, help="Lightning example: val_acc to reach")
    p.add_argument("--target-loss", type=float, default=1.35, help="HF example: eval_loss to reach (entropy ~1.26)")
    p.add_argument("--eval-every", type=int, default=512, help="samples between validations")
    p.add_argument("--max-samples", type=int, default=32768, help="longest training run")
    p.add_argument("--max-seconds", type=float, default=300.0, help="longest training time per run")
    p.add_argument("--out", default=None, help="where the searches' run directories go (default: a temp dir)")
    args = p.parse_args()
    quiet()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_trainers-"))
    seeds = range(args.seeds)
    lo, hi = 16, 256

    fb, flr, finder_cost = lightning_finder(lo, hi)
    print(f"lightning finder: batch_size={fb} lr={flr:.4g} ({finder_cost:.1f} s)", flush=True)
    tb, tlr, l_search = tune_batch_answer("lightning_cnn", args, out)
    print(f"tune_batch (lightning): batch_size={tb} lr={tlr:.4g} ({l_search:.1f} s)", flush=True)
    lf, lt = [], []
    for s in seeds:  # interleaved: a slow drift of the machine falls on both answers alike
        lf.append(lightning_tta(fb, flr, s, args))
        lt.append(lightning_tta(tb, tlr, s, args))
    print(f"lightning time to val_acc {args.target_acc}: finder {[round(t, 1) for t, _ in lf]} s (best "
          f"{max(b for _, b in lf):.3f}), tune_batch {[round(t, 1) for t, _ in lt]} s "
          f"(best {max(b for _, b in lt):.3f})",
          flush=True)

    hb, hlr, h_search = tune_batch_answer("hf_tiny_gpt2", args, out)
    print(f"tune_batch (transformers): batch_size={hb} lr={hlr:.4g} ({h_search:.1f} s)", flush=True)
    ha, ht = [], []
    for s in seeds:  # interleaved, as above
        ha.append(hf_tta(None, None, s, args))
        ht.append(hf_tta(hb, hlr, s, args))
    print(f"hf auto_find_batch_size: trained at batch_size={ha[0][3]} lr=5e-05 (the example's default); its own "
          f"cost {ha[0][2]:.1f} s", flush=True)
    print(f"hf time to eval_loss {args.target_loss}: auto {[round(r[0], 1) for r in ha]} s (best "
          f"{min(r[1] for r in ha):.3f}), tune_batch {[round(r[0], 1) for r in ht]} s "
          f"(best {min(r[1] for r in ht):.3f})",
          flush=True)
    print(f"RESULT lightning_finder_tta_s={median([t for t, _ in lf]):.1f} "
          f"tune_batch_lightning_tta_s={median([t for t, _ in lt]):.1f} hf_auto_tta_s={median([r[0] for r in ha]):.1f} "
          f"tune_batch_hf_tta_s={median([r[0] for r in ht]):.1f} lightning_finder_cost_s={finder_cost:.1f} "
          f"hf_auto_cost_s={median([r[2] for r in ha]):.1f} search_cost_s={l_search + h_search:.1f} "
          f"lightning_search_cost_s={l_search:.1f} hf_search_cost_s={h_search:.1f} "
          f"lightning_finder_tta_range={spread([t for t, _ in lf])} tune_batch_lightning_tta_range="
          f"{spread([t for t, _ in lt])} hf_auto_tta_range={spread([r[0] for r in ha])} "
          f"tune_batch_hf_tta_range={spread([r[0] for r in ht])} seeds={args.seeds}")


if __name__ == "__main__":
    main()
