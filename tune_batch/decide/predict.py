"""Time to target predicted from the gradient noise scale (McCandlish et al.: samples to a given
loss = E_min x (1 + B / B_noise)), and the blend of measured and predicted time a recommendation
ranks a confirmed candidate by; ``decide.confirm.predictions`` applies them to a confirmation."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from tune_batch.store.records import Status, TrialResult


def estimate_time(measured: float | None, prediction: dict[str, Any]) -> float | None:
    """The time to target a recommendation ranks a confirmed candidate by: the geometric mean of
    its runs' median and the time predicted for it from the *other* candidates' runs and the
    search's noise scale (two independent readings: one candidate's pair of confirmation runs can
    be lucky; on this machine a config's run pairs span up to 3.4x, the prediction is within 1.5x
    for 83-89 % of candidates). The runs' time alone without a prediction, or where its
    throughput comes only from disturbed windows."""
    if not usable_prediction(measured, prediction):
        return measured
    return math.sqrt(measured * prediction["predicted_s"])


def usable_prediction(measured: float | None, prediction: dict[str, Any]) -> bool:
    """Whether ``estimate_time`` blends a prediction in: the runs reached the target, and there is a
    prediction whose throughput is not from disturbed windows only."""
    return measured is not None and bool(prediction.get("predicted_s")) and not prediction.get("disturbed_throughput")


def search_noise_scale(records: Sequence[TrialResult]) -> tuple[float | None, int]:
    """(B_noise of the search, trials it pools): the mean tr(Sigma) over the mean |G|^2 of every
    finished trial that estimated them. One short trial's estimate is noisy within a factor of
    10 (repeats of one config read 35 and 650); the two quantities are smoothed over the search
    before the ratio, as McCandlish et al. advise (the ratio of noisy estimates is biased)."""
    got = [(r.info.gns_trace_sigma, r.info.gns_grad_sq) for r in records
           if r.status is Status.OK and r.info.gns_trace_sigma is not None and r.info.gns_grad_sq is not None]
    if not got:
        return None, 0
    g2 = statistics.fmean(g for _, g in got)
    return (statistics.fmean(s for s, _ in got) / g2 if g2 > 0 else None), len(got)


def samples_factor(b_noise: float, batch: int) -> float:
    """Samples to a given loss relative to the fewest possible (McCandlish et al.): 1 + B / B_noise."""
    return 1.0 + batch / b_noise


def predict_time(trial: TrialResult, e_min: float, b_noise: float | None, sps: float | None) -> float | None:
    """Predicted training seconds to the target of a config: E_min x (1 + B / B_noise) samples
    at ``sps`` samples/s."""
    if not b_noise or not sps:
        return None
    return e_min * samples_factor(b_noise, trial.params.batch_size) / sps
