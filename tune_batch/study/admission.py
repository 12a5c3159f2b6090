"""Policy: which proposed configs are run, decided before any measurement.

A config that breaks the batch rules, or that the memory feasibility model says cannot fit,
is recorded as ``skipped`` (infeasible, zero compute) without training; so is a proposal of
params a search trial already measured (``duplicate:``; every search trial trains with
``search.seed``, so it would measure the same thing again), which the sampler is told the earlier
result of. Measurement
(``trial``) never decides this; the backends ask :meth:`Policy.skip` first. The policy also
keeps what a result is told to the sampler as (:meth:`Policy.told`: throughput per step).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable

from tune_batch.analysis.headroom import worst_bytes
from tune_batch.analysis.objectives import DUPLICATE, is_duplicate
from tune_batch.analysis.points import StepMeans
from tune_batch.config import Config
from tune_batch.measure.oom import MemoryFit, cap_bytes, fit_memory
from tune_batch.store.records import Params, Status, TrialInfo, TrialResult
from tune_batch.study import space as space_mod


class FeasibilityModel:
    """Learns the memory boundary from finished trials, per ``num_gpus`` (the model, input shape
    and dtype are fixed within a search), and says which configs to skip without running:

    (a) boundary: a per-worker batch at least as large as one that already ran out of memory;
    (b) prediction: with two or more measured batch sizes, a config whose predicted peak is over
        the cap (when a cap is known). The peaks are the worst cases (``peak_mem_worst_bytes``:
        the largest batch of the data, a validation batch), where the trials measured them.

    No safety margin below the cap here: a config predicted just under it runs, and a real OOM
    (which costs one step) settles it, because skipping a config that would have fit can lose
    the best point of the front (measured: with a 10 % margin, batch 64 at 38.3 MiB under a
    40 MiB cap was skipped, and the seeded search's hypervolume at 25 % of the grid fell from
    0.92 to 0.51). ``max-batch``, which recommends one batch to run on, keeps the margin.
    """

    def __init__(self, cap: int | None = None) -> None:
        self.cap_bytes = cap
        self._points: dict[int, list[tuple[int, float]]] = {}
        self._oom: dict[int, tuple[int, object]] = {}  # num_gpus -> (smallest per-worker batch that OOMed, trial id)

    def observe(self, result: TrialResult) -> None:
        n, per_worker = result.params.num_gpus, result.params.per_worker_batch
        peak = worst_bytes(result)  # the worst case where measured: what the limit is checked against
        if result.status is Status.OK and peak is not None:
            self._points.setdefault(n, []).append((per_worker, float(peak)))
        elif result.status is Status.OOM:
            cur = self._oom.get(n)
            if cur is None or per_worker < cur[0]:
                self._oom[n] = (per_worker, result.trial_id)
        else:
            return
        if result.info.memory_cap_bytes and self.cap_bytes is None:
            self.cap_bytes = int(result.info.memory_cap_bytes)

    def fit(self, num_gpus: int = 1) -> MemoryFit | None:
        return fit_memory(self._points.get(num_gpus, []))

    def skip_reason(self, params: Params) -> str | None:
        """Why ``params`` cannot fit (and need not be run), or None."""
        n, per_worker = params.num_gpus, params.per_worker_batch
        oom = self._oom.get(n)
        if oom is not None and per_worker >= oom[0]:
            return (f"memory: per-worker batch {per_worker} >= {oom[0]}, which ran out of memory "
                    f"in trial {oom[1]} (num_gpus {n})")
        fit = self.fit(n)
        if fit is not None and self.cap_bytes is not None:
            pred = fit.predict(per_worker)
            if pred > self.cap_bytes:
                return (f"memory: predicted peak {pred / 2**20:.1f} MiB > cap {self.cap_bytes / 2**20:.1f} MiB "
                        f"(fit over per-worker batches {fit.batch_range[0]}-{fit.batch_range[1]}, "
                        f"{fit.n_points} points)")
        return None


class DivergenceModel:
    """Learns the learning-rate boundary from diverged trials: at the same batch size and
    num_gpus, a learning rate at least as large as one whose loss went non-finite is skipped
    (the reason starts with "diverged:", told to the sampler as the ``diverged`` constraint).
    Only the same batch size: a larger batch often tolerates a larger learning rate."""

    def __init__(self) -> None:
        self._lowest: dict[tuple[int, int], tuple[float, object]] = {}  # (batch, gpus) -> (lr, trial id)

    def observe(self, result: TrialResult) -> None:
        if result.status is Status.DIVERGED and result.info.repeat_of is None:
            key, lr = (result.params.batch_size, result.params.num_gpus), result.params.lr
            if key not in self._lowest or lr < self._lowest[key][0]:
                self._lowest[key] = (lr, result.trial_id)

    def skip_reason(self, params: Params) -> str | None:
        low = self._lowest.get((params.batch_size, params.num_gpus))
        if low is not None and params.lr >= low[0]:
            return (f"diverged: lr {params.lr:.3g} >= {low[0]:.3g}, whose loss went non-finite at batch_size "
                    f"{params.batch_size} in trial {low[1]}")
        return None


#: Skipped proposals in a row that the sampler is asked again for without using up a trial of
#: ``budget.trials`` (a skip costs no compute); past it, skips count (every choice may be infeasible).
FREE_SKIPS_IN_A_ROW = 20


def params_key(params: Params) -> str:
    """What makes two proposals the same run: every param, the user's extras included."""
    return json.dumps(params.to_dict(), sort_keys=True, default=str)


class Policy:
    """The run-or-skip decision of one search: the batch rules of the space, then the memory
    feasibility model and the divergence model (when ``resources.feasibility_model`` is on),
    taught by every result."""

    def __init__(self, config: Config, seen: Iterable[TrialResult] = ()) -> None:
        self.config = config
        # with train.accumulation "auto" a batch over the cap is trained in micro-batches: none is skipped
        self.feasibility = (FeasibilityModel(cap_bytes(config.resources.device_memory, None))
                            if config.resources.feasibility_model and config.train.accumulation != "auto" else None)
        self.divergence = DivergenceModel() if config.resources.feasibility_model else None
        self._skips_in_a_row = 0
        self.steps = StepMeans()
        self._measured: dict[str, TrialResult] = {}  # params key -> the first ok search trial of them
        for result in seen:
            self.observe(result)

    def observe(self, result: TrialResult) -> None:
        self.steps.observe(result)
        if result.status is Status.OK and result.counted:
            self._measured.setdefault(params_key(result.params), result)
        if self.feasibility is not None:
            self.feasibility.observe(result)
        if self.divergence is not None:
            self.divergence.observe(result)

    def told(self, result: TrialResult) -> TrialResult:
        """``result`` as the sampler is told it (observe it first): its samples/s and other
        step-work objectives are its step's mean over the results seen (points.StepMeans); a
        ``duplicate:`` skip is told as the trial it repeats."""
        if is_duplicate(result):
            result = self._measured.get(params_key(result.params), result)
        return self.steps.told(result)

    def duplicate_of(self, params: Params) -> TrialResult | None:
        """The ok search trial that already measured ``params``, or None."""
        return self._measured.get(params_key(params))

    def skip_reason(self, params: Params) -> str | None:
        """Why ``params`` are not to be run, or None. Batch-rule reasons start with "space:",
        learning rates past a divergence with "diverged:"."""
        bad = space_mod.violation(params, self.config.space)
        if bad:
            return f"space: {bad}"
        short = self.config.budget.steps_short(params.batch_size)
        if short:  # such a trial could only fail
            return f"space: {short} (raise budget.train_samples)"
        same = self.duplicate_of(params)
        if same is not None:
            return f"{DUPLICATE} trial {same.trial_id} measured these params with the same seed"  # told its result
        why = self.feasibility.skip_reason(params) if self.feasibility is not None else None
        return why or (self.divergence.skip_reason(params) if self.divergence is not None else None)

    def skip(self, params: Params, trial_id: int | str | None, *, free: bool = False) -> TrialResult | None:
        """The ``skipped`` record of ``params`` when they are not to be run, else None. ``free``:
        the caller asks the sampler again after a skip, so the record is marked ``free_skip`` (it
        uses no trial of the budget) unless FREE_SKIPS_IN_A_ROW skips came in a row already."""
        reason = self.skip_reason(params)
        if not reason:
            self._skips_in_a_row = 0
            return None
        rec = skipped(params, trial_id, reason)
        if free and self._skips_in_a_row < FREE_SKIPS_IN_A_ROW:
            self._skips_in_a_row += 1
            rec = rec.replace(info=rec.info.with_(free_skip=True))
        return rec


def skipped(params: Params, trial_id: int | str | None, reason: str) -> TrialResult:
    """A ``skipped`` record: no training, zero training time."""
    return TrialResult(trial_id, params, Status.SKIPPED, reason,
                       info=TrialInfo(host=socket.gethostname(), pid=os.getpid(), train_s=0.0))
