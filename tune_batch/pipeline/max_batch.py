"""``max-batch``: the largest batch size that fits under the memory cap with the safety margin,
found with the memory model in few probes.

A probe is a short real training run (one warm-up step and two measured steps, no validation
pass) whose worst-case peak is measured: the largest batch the data can produce and a validation
batch at that size (``data.worst_case``), beside the window's. Two probes at the smallest batch sizes give a line
``peak = a + b x batch``; the largest candidate predicted to fit is probed next, and every
probe refines the line, until the predicted answer has been probed and fits (the next size up
is probed too when it is predicted only slightly over the limit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tune_batch.analysis.headroom import worst_bytes
from tune_batch.config import Config
from tune_batch.errors import UserError
from tune_batch.measure.oom import MemoryFit, cap_bytes, fit_memory


@dataclass(frozen=True)
class Probe:
    batch_size: int
    status: str  # ok | oom | failed
    peak_mem_bytes: float | None
    seconds: float
    reason: str | None = None


@dataclass(frozen=True)
class MaxBatchResult:
    batch_size: int | None
    probes: list[Probe]
    fit: MemoryFit | None
    cap_bytes: int
    limit_bytes: float
    message: str


ProbeFn = Callable[[int], Probe]


def probe_trial(config: Config, num_gpus: int = 1, steps: int = 2) -> ProbeFn:
    """A probe that runs a real short trial at a given batch size."""
    from tune_batch.trial import run_trial

    def probe(batch_size: int) -> Probe:
        budget = config.budget.model_copy(update={"train_samples": batch_size * (steps + 1), "warmup_steps": 1})
        profile = config.profile.model_copy(update={"enabled": False})
        cfg = config.model_copy(update={"budget": budget, "profile": profile})
        res = run_trial(cfg, {"batch_size": batch_size, "lr": config.space.lr.low, "num_gpus": num_gpus},
                        validate=False)
        return Probe(batch_size, res.status.value, worst_bytes(res), res.duration_s, res.reason)

    return probe


def candidates(smallest: int, largest: int) -> list[int]:
    """Powers of two from ``smallest`` (rounded up to one) to ``largest``."""
    out, b = [], 1
    while b < smallest:
        b *= 2
    while b <= largest:
        out.append(b)
        b *= 2
    return out


def find_max_batch(cands: list[int], cap: int, margin: float, probe: ProbeFn) -> MaxBatchResult:
    """The largest candidate whose measured peak is under ``cap x (1 - margin)``."""
    limit = cap * (1.0 - margin)
    probes: list[Probe] = []
    fits: dict[int, float] = {}
    too_big: int | None = None  # smallest candidate known not to fit

    def run(b: int) -> bool:
        nonlocal too_big
        p = probe(b)
        probes.append(p)
        if p.status == "failed":
            raise UserError(f"max-batch: the probe at batch_size {b} failed ({p.reason})")
        ok = p.status == "ok" and p.peak_mem_bytes is not None and p.peak_mem_bytes <= limit
        if ok:
            fits[b] = float(p.peak_mem_bytes)  # type: ignore[arg-type]
        elif too_big is None or b < too_big:
            too_big = b
        return ok

    def result(best: int | None, msg: str) -> MaxBatchResult:
        return MaxBatchResult(best, probes, fit_memory(list(fits.items())), cap, limit, msg)

    if not cands:
        raise UserError("max-batch: no candidate batch size (the training set is smaller than space.batch_size.min)")
    if not run(cands[0]):
        p = probes[-1]
        seen = f"peak {p.peak_mem_bytes / 2**20:.1f} MiB" if p.peak_mem_bytes else p.reason
        return result(None, f"the model does not fit even at batch_size {cands[0]} ({seen}; "
                            f"limit {limit / 2**20:.1f} MiB = cap less {margin:.0%} margin)")
    if len(cands) > 1 and not run(cands[1]):
        return result(cands[0], "the second-smallest batch size does not fit")
    while True:
        fit = fit_memory(list(fits.items()))
        allowed = [c for c in cands if too_big is None or c < too_big]
        predicted = [c for c in allowed if fit is None or fit.predict(c) <= limit]
        best_known = max(fits)
        target = max(predicted) if predicted else best_known
        if target <= best_known:
            # measured peaks are noisy at small batches: a next size predicted only slightly
            # over the limit is probed once before it is ruled out
            up = [c for c in allowed if c > best_known]
            if up and fit is not None and fit.predict(up[0]) <= limit * 1.5:
                if run(up[0]):
                    continue
            return result(best_known, "largest batch size predicted and measured to fit")
        run(target)


def max_batch(config: Config, num_gpus: int = 1, probe: ProbeFn | None = None) -> MaxBatchResult:
    """Find the largest batch size for ``config`` under ``resources.device_memory`` (CPU: a size;
    CUDA: a size or a fraction of the device; without a cap on CUDA, the whole device), less on
    CUDA what other processes hold at the start."""
    import torch

    from tune_batch.workload import build_datasets

    total = (torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
             if torch.cuda.is_available() else None)
    cap = cap_bytes(config.resources.device_memory, total)
    if total is not None:  # on a GPU: what other processes hold is not ours to use
        from tune_batch.measure.tenants import others_bytes, usable_bytes

        cap = usable_bytes(total, cap, others_bytes(torch.cuda.current_device())[0])
    if cap is None:
        raise UserError("max-batch: on a CPU it needs resources.device_memory as a size, "
                        "e.g. --set resources.device_memory=2GiB")
    ds = build_datasets(config.data, num_classes=config.model.num_classes, seed=config.search.seed)
    smallest = min(config.space.batch_choices()) // num_gpus
    cands = candidates(max(1, smallest), len(ds.train))  # type: ignore[arg-type]
    return find_max_batch(cands, cap, config.resources.memory_margin, probe or probe_trial(config, num_gpus))


def render(result: MaxBatchResult, num_gpus: int = 1) -> str:
    lines = [f"cap {result.cap_bytes / 2**20:.1f} MiB, limit with margin {result.limit_bytes / 2**20:.1f} MiB"]
    lines.append("probes:")
    for i, p in enumerate(result.probes, 1):
        peak = f"{p.peak_mem_bytes / 2**20:8.1f} MiB" if p.peak_mem_bytes is not None else "       -    "
        # it trained, over the limit: "ok" read as "fits" beside the answer below it
        over = p.status == "ok" and p.peak_mem_bytes is not None and p.peak_mem_bytes > result.limit_bytes
        status = "over the limit" if over else p.status
        lines.append(f"  {i}. batch_size {p.batch_size:6d} per worker: {status:4s} peak {peak}  ({p.seconds:.1f} s)")
    if result.fit is not None:
        f = result.fit
        lines.append(f"memory model: peak = {f.intercept_bytes / 2**20:.1f} MiB + "
                     f"{f.slope_bytes / 2**20:.3f} MiB x batch "
                     f"({f.n_points} points)")
        b = max(1, f.batch_range[0])
        curve = []
        while b <= max(f.batch_range[1] * 4, 64):
            curve.append(f"{b}: {f.predict(b) / 2**20:.0f} MiB")
            b *= 2
        lines.append("predicted: " + ", ".join(curve))
    if result.batch_size is None:
        lines.append(f"max-batch: {result.message}")
    else:
        lines.append(f"max-batch: batch_size {result.batch_size * num_gpus} (per worker {result.batch_size}, "
                     f"num_gpus {num_gpus}): {result.message}")
    return "\n".join(lines)
