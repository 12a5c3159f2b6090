"""The user's current config (``baseline:``) confirmed beside the candidates: how much sooner
the recommendation reaches the target, what the search cost, and after how many runs it pays
for itself.

Planning gives the baseline the same confirmation runs as a candidate (same seeds, same length,
the same target); reading them is :func:`compare`, from structured values only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tune_batch.analysis.noise import pooled_sd, t95
from tune_batch.analysis.report import latest_per_trial
from tune_batch.config import Config
from tune_batch.decide.confirm import BASELINE, Candidate, Confirmation, reach_times
from tune_batch.decide.target import level
from tune_batch.store.records import Params, Status, TrialResult

__all__ = ["BASELINE", "Baseline", "compare", "done_ids", "is_current", "params_of", "stale_ids"]


def params_of(config: Config) -> Params | None:
    b = config.baseline
    return None if b is None else Params(b.batch_size, b.lr, b.num_gpus)


def is_current(config: Config, run: TrialResult) -> bool:
    """Whether ``run`` is a baseline run of the config's baseline as it is now: a search continued
    with another ``baseline:`` (allowed on resume) runs that one, and its earlier runs are not it."""
    return run.info.confirm_of == BASELINE and run.params == params_of(config)


def stale_ids(config: Config, records: Sequence[TrialResult]) -> set[object]:
    """Trial ids whose latest record is a baseline run of another baseline than the config's: to
    run again (they are not done)."""
    return {r.trial_id for r in latest_per_trial(records)
            if r.info.confirm_of == BASELINE and not is_current(config, r)}


def done_ids(config: Config, records: Sequence[TrialResult]) -> set[object]:
    """The ids a confirmation round counts as run: every record's, but another baseline's runs."""
    return {r.trial_id for r in records} - stale_ids(config, records)


@dataclass(frozen=True)
class Baseline:
    """The baseline's confirmed runs against the recommended candidate's."""

    params: Params
    runs: tuple[TrialResult, ...]
    time_to_target_s: float | None  # median over its runs that reached the target (most must)
    reached: int
    best_value: float | None  # the best value of the target metric its runs reached
    speedup: float | None  # baseline's time to target / the recommendation's
    # speedup x the 95 % half-width of the log speedup (the runs' log times, pooled): the interval is
    # speedup x exp(+- speedup_ci / speedup) (``speedup_interval``); None with < 2 runs a side
    speedup_ci: float | None
    speedup_at_least: float | None  # the baseline never reached it: its whole training time / the recommendation's
    recommended_s: float | None  # the recommendation's time to target
    search_wall_s: float | None  # the whole search, start-up included (every invocation)
    payback_runs: int | None  # runs to the target after which the time saved exceeds the search's
    # where it never reached the target: its level (the mean over its runs of each one's last quarter
    # of validations) against the recommendation's, and whether the gap is inside the runs' noise
    level: float | None = None
    recommended_level: float | None = None
    level_within_noise: bool | None = None  # None: not read (it reached the target, or no spread measured)
    recommended_gpus: int | None = None  # the recommendation's GPU count: device-seconds are time x GPUs
    kept: bool = False  # the baseline was sooner beyond noise than the search's pick: it stays the recommendation
    kept_by_devices: bool = False  # ... in device-seconds (--prefer device_seconds_to_target)
    no_time: str | None = None  # why the recommendation has no time to the target to compare, where it has none
    # a goal's length and no target decides by the final value (Confirmation.at_length): the baseline's
    # and the recommendation's final validation at that length, each the mean over its runs
    final_value: float | None = None
    recommended_final: float | None = None
    # a speedup inside the noise (its interval needs the runs' spread, so it is measured): the fewest
    # runs a side (confirm.seeds) at which one this size would leave 1 out of its interval
    # (``runs_to_tell``); None: not within MAX_RUNS_TO_TELL (or the speedup is beyond the noise)
    runs_to_tell_apart: int | None = None

    @property
    def device_seconds(self) -> tuple[float, float] | None:
        """(the recommendation's, the baseline's) device-seconds to the target, where both reached it.
        The speedup is in wall seconds; on other GPU counts these say what it costs in devices
        (2 GPUs 1.2x sooner use 1.6x the device-seconds)."""
        if self.time_to_target_s is None or self.recommended_s is None or self.recommended_gpus is None:
            return None
        return self.recommended_s * self.recommended_gpus, self.time_to_target_s * self.params.num_gpus

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params.to_dict(), "time_to_target_s": self.time_to_target_s,
                "reached_target": f"{self.reached} of {len(self.runs)}", "best_value": self.best_value,
                "runs": [r.trial_id for r in self.runs], "speedup": self.speedup, "speedup_ci": self.speedup_ci,
                "speedup_interval": None if self.speedup_interval is None else list(self.speedup_interval),
                "speedup_at_least": self.speedup_at_least, "recommended_time_to_target_s": self.recommended_s,
                "search_wall_s": self.search_wall_s, "payback_runs": self.payback_runs,
                "payback_established": self.payback_runs is not None and self.beyond_noise,
                "level": self.level, "recommended_level": self.recommended_level,
                "level_within_noise": self.level_within_noise, "kept": self.kept,
                "kept_by_devices": self.kept_by_devices, "not_compared": self.not_compared,
                "device_seconds_to_target": None if self.device_seconds is None else self.device_seconds[1],
                "recommended_device_seconds_to_target": None if self.device_seconds is None else self.device_seconds[0],
                "final_value": self.final_value, "recommended_final_value": self.recommended_final,
                "runs_to_tell_apart": self.runs_to_tell_apart}

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """The speedup's 95 % interval, from the log times (a ratio's interval is not symmetric:
        1.42 +- 2.22 read as if 0 and below were possible; it is 0.32-6.3)."""
        if self.speedup is None or self.speedup_ci is None or self.speedup <= 0:
            return None
        w = self.speedup_ci / self.speedup
        return self.speedup * math.exp(-w), self.speedup * math.exp(w)

    @property
    def beyond_noise(self) -> bool:
        """Whether the speedup's 95 % interval leaves out 1 (known only with two runs a side)."""
        iv = self.speedup_interval
        return iv is not None and (iv[0] > 1.0 or iv[1] < 1.0)

    def line(self, metric: str) -> str:
        """The summary's first line; where the goal's length decides (final values), that comparison
        leads it."""
        text = self._line(metric)
        if self.final_value is None or self.recommended_final is None or self.kept:
            return text
        head, sep, rest = text.partition(": ")
        return (f"{head}{sep}at the run's length, final {metric} {self.recommended_final:.4g} vs the baseline's "
                f"{self.final_value:.4g} (mean over the runs; the length decides); {rest}")

    def _tell(self) -> str:
        """What would tell a speedup inside the noise from none: more runs a side, how many."""
        if self.runs_to_tell_apart is None:
            return (f"; a difference this small is not told apart within {MAX_RUNS_TO_TELL} runs a side at this "
                    f"spread: for a run of yours, the two are alike")
        return (f"; about {self.runs_to_tell_apart} runs a side (confirm.seeds) would tell them apart, if the "
                f"speedup and the runs' spread hold")

    def _line(self, metric: str) -> str:
        p = self.params
        name = f"the baseline (batch_size={p.batch_size} lr={p.lr:.3g} num_gpus={p.num_gpus})"
        cost = f"; the search cost {self.search_wall_s:.0f} s" if self.search_wall_s is not None else ""
        if self.speedup is not None:
            iv = self.speedup_interval
            ci = f", 95 % {iv[0]:.2f}-{iv[1]:.2f}" if iv is not None else " (no run-to-run spread measured)"
            within = iv is not None and not self.beyond_noise
            how = ": within the runs' noise" if within else ""
            pay = (f", paid back after {self.payback_runs} run(s) to the target" if self.payback_runs is not None
                   else ", never paid back: the baseline is as fast or faster")
            if within:  # a saving inside the noise pays nothing back for sure
                pay = (f"; whether it pays back is not known within that noise (after {self.payback_runs} run(s) "
                       f"at the point estimate)" if self.payback_runs is not None else "")
                pay += self._tell()
            elif iv is None and self.payback_runs is not None:  # no spread: nothing established
                pay = (f"; whether it pays back is not established without a run-to-run spread (after "
                       f"{self.payback_runs} run(s) at the point estimate; confirm.seeds >= 2 measures one)")
            devices = ""
            if self.device_seconds is not None and self.recommended_gpus != p.num_gpus:
                mine, theirs = self.device_seconds
                devices = (f"; on {self.recommended_gpus} GPU(s) against {p.num_gpus}: {mine:.2f} vs {theirs:.2f} "
                           f"device-s (x{mine / theirs:.2f})")
            if self.kept and self.kept_by_devices and self.device_seconds is not None:
                mine, theirs = self.device_seconds
                return (f"recommendation: keep {name}: it reached the {metric} target with fewer device-seconds "
                        f"than the search's pick beyond the runs' noise ({theirs:.2f} vs {mine:.2f} device-s; "
                        f"{self.time_to_target_s:.2f} s vs {self.recommended_s:.2f} s of training){cost}, and "
                        f"found nothing cheaper")
            if self.kept:
                return (f"recommendation: keep {name}: it reached the {metric} target sooner than the search's "
                        f"pick beyond the runs' noise ({self.time_to_target_s:.2f} s vs {self.recommended_s:.2f} s "
                        f"of training; the pick's speedup {self.speedup:.2f}{ci}){devices}{cost}, and found "
                        f"nothing faster")
            factor, interval = self._sooner(iv)
            return (f"recommendation vs {name}: {factor} to the {metric} target ({interval}{how}; "
                    f"{self.recommended_s:.2f} s vs {self.time_to_target_s:.2f} s of training){devices}{cost}"
                    f"{pay if self.search_wall_s is not None else ''}")
        if self.speedup_at_least is not None:
            chance = ""
            if self.level_within_noise:  # a miss by less than the noise says little about being slower
                chance = (f" (not established: the baseline levelled off at {self.level:.4g}, within the runs' noise "
                          f"of the recommendation's {self.recommended_level:.4g}; it may reach the target in "
                          f"other runs)")
            # its runs' length over the recommendation's time: below 1 its runs ended sooner, and say nothing
            bound = (f"at least {self.speedup_at_least:.2f}x sooner" if self.speedup_at_least >= 1 else
                     f"which is sooner is not measured: the baseline's runs stopped after "
                     f"{self.speedup_at_least * self.recommended_s:.2f} s of training")
            return (f"recommendation vs {name}: the baseline never reached the {metric} target in "
                    f"{len(self.runs)} run(s) (best {self.best_value:.4g}); the recommendation reached it in "
                    f"{self.recommended_s:.2f} s, {bound}{chance}{cost}")
        failed = [r for r in self.runs if r.status is not Status.OK]
        if len(failed) == len(self.runs):  # "no recommendation reached the target" blamed the wrong side
            return f"recommendation vs {name}: no comparison: {self.not_compared}{cost}"
        return f"recommendation vs {name}: no comparison ({self.not_compared}){cost}"

    def _sooner(self, iv: tuple[float, float] | None) -> tuple[str, str]:
        """The speedup once, in the direction it goes, and its 95 % interval in the same terms:
        ("1.42x sooner", "95 % 0.30-6.78"), ("1.19x later", "95 % 0.71-2.00")."""
        s = self.speedup
        assert s is not None
        if iv is not None and s < 1:
            iv = (1 / iv[1], 1 / iv[0])
        interval = f"95 % {iv[0]:.2f}-{iv[1]:.2f}" if iv is not None else "no run-to-run spread measured"
        return (f"{s:.2f}x sooner" if s >= 1 else f"{1 / s:.2f}x later"), interval

    @property
    def not_compared(self) -> str | None:
        """Why there is neither a speedup nor an at-least figure, in words; None where there is one."""
        if self.speedup is not None or self.speedup_at_least is not None:
            return None
        failed = [r for r in self.runs if r.status is not Status.OK]
        if failed and len(failed) == len(self.runs):
            why = (failed[0].reason or failed[0].status.value).splitlines()[0][:200]
            return f"the baseline's {len(failed)} run(s) ended {failed[0].status.value} ({why})"
        return self.no_time or "no recommendation reached the target"


#: The most runs a side a summary projects when it says what would tell a speedup from none.
MAX_RUNS_TO_TELL = 64


def runs_to_tell(speedup: float, sd: float, df: int, mine: int, theirs: int) -> int | None:
    """The fewest runs a side at which a speedup this size, with log times spread by ``sd`` (pooled
    over ``df`` degrees of freedom from ``mine`` and ``theirs`` runs and other configs'), would leave
    1 out of its 95 % interval: each added run adds a degree of freedom. None: not within
    ``MAX_RUNS_TO_TELL``."""
    gap = abs(math.log(speedup)) if speedup > 0 else 0.0
    if gap == 0.0 or not math.isfinite(gap):
        return None
    for n in range(max(mine, theirs, 2), MAX_RUNS_TO_TELL + 1):
        if t95(df + 2 * n - mine - theirs) * sd * math.sqrt(2 / n) < gap:
            return n
    return None


def _spread(conf: Confirmation, mine: list[float], gpus: set[int]) -> tuple[float | None, int]:
    """The log times' standard deviation pooled over the confirmed configs of ``gpus`` and the
    baseline's runs (``mine``), with its degrees of freedom."""
    groups = [[math.log(t) for t in reach_times(c.runs, conf.target, conf.maximize) if t > 0]
              for c in conf.candidates if c.trial.params.num_gpus in gpus]
    return pooled_sd([*groups, [math.log(t) for t in mine if t > 0]])


def _speedup_ci(speedup: float, spread: tuple[float | None, int], mine: list[float],
                theirs: list[float]) -> float | None:
    """The speedup x the 95 % half-width of its log: the log times' spread pooled over the
    confirmed configs of the two sides' GPU counts (``gpus``: a worker group's runs spread
    differently, ``slower_beyond_noise``) and the baseline, with Student's t of its degrees of
    freedom (two runs a side and the normal 1.96 gave one degree of freedom a side the width of
    many). The interval is ``Baseline.speedup_interval``."""
    sd, df = spread  # _spread's, over the two sides' GPU counts and the baseline (``mine``)
    if not mine or not theirs or sd is None:
        return None
    return speedup * t95(df) * sd * math.sqrt(1 / len(mine) + 1 / len(theirs))


def compare(config: Config, conf: Confirmation, best: Candidate | None, runs: Sequence[TrialResult],
            search_wall_s: float | None, recommended: TrialResult | None = None) -> Baseline | None:
    """The baseline's runs read against the confirmation's target and its recommended candidate
    (``best``, the confirmed candidate of the ``recommended`` trial); None without a baseline or its runs."""
    params = params_of(config)
    ok = tuple(r for r in runs if r.status is Status.OK and r.info.curve)
    if params is None or not runs:
        return None
    target, up = conf.target, conf.maximize
    values = [c[2] for r in ok for c in r.info.curve or []]
    best_value = (max(values) if up else min(values)) if values else None
    hits = reach_times(ok, target, up)
    mine = statistics.median(hits) if hits and 2 * len(hits) > len(runs) else None
    rec_s = best.time_to_target_s if best is not None else None
    speedup = ci = at_least = payback = None
    theirs: list[float] = []
    spread = _spread(conf, hits, {params.num_gpus, best.trial.params.num_gpus if best else 1})
    if mine is not None and rec_s:
        speedup = mine / rec_s
        theirs = reach_times(best.runs, target, up) if best is not None else []
        ci = _speedup_ci(speedup, spread, hits, theirs)
        saved = mine - rec_s
        if search_wall_s is not None and saved > 0:
            payback = math.ceil(search_wall_s / saved)
    levels: tuple[float | None, float | None, bool | None] = (None, None, None)
    if mine is None and rec_s and ok:  # it never reached the target: at least this much slower, if beyond noise
        at_least = statistics.median(r.info.train_s or 0.0 for r in ok) / rec_s
        levels = _levels(conf, best, ok)
    no_time = None
    if not rec_s and recommended is not None:  # (without a recommendation: none reached the target)
        no_time = (f"the recommendation, trial {recommended.trial_id}, was chosen among the short trials by --prefer "
                   f"and not confirmed at length: it has no time to the target" if best is None else
                   f"the recommendation's confirmation runs (trial {recommended.trial_id}) did not reach the target")
    finals = [v for v in ((r.info.curve or [])[-1][2] for r in ok) if math.isfinite(v)]
    at_length = best if conf.at_length and finals else None  # the goal's length decides: its final values
    b = Baseline(params, tuple(runs), mine, len(hits), best_value, speedup, ci, at_least, rec_s, search_wall_s,
                 payback, *levels, recommended_gpus=best.trial.params.num_gpus if best is not None else None,
                 no_time=no_time, final_value=statistics.fmean(finals) if at_length else None,
                 recommended_final=at_length.final_acc if at_length else None)
    if b.speedup is None or b.speedup_interval is None or b.beyond_noise:
        return b
    sd, df = spread
    assert sd is not None, "an interval without a measured spread"
    # a speedup inside the noise: how many runs a side would tell it from none
    return replace(b, runs_to_tell_apart=runs_to_tell(b.speedup, sd, df, len(hits), len(theirs)))


def _run_levels(runs: Sequence[TrialResult]) -> list[float]:
    return [v for v in (level(r.info.curve or []) for r in runs) if math.isfinite(v)]


def _levels(conf: Confirmation, best: Candidate | None, ok: Sequence[TrialResult]
            ) -> tuple[float | None, float | None, bool | None]:
    """(the baseline's level, the recommendation's, whether the baseline's shortfall is inside the
    noise): the gap of the two mean levels against its 95 % interval, from the spread of the run
    levels pooled over every confirmed config and the baseline (one config's own two runs give too
    wide an interval). A baseline that missed the target by less than that is not shown slower."""
    mine, theirs = _run_levels(ok), _run_levels(best.runs) if best is not None else []
    if not mine or not theirs:
        return None, None, None
    a, b = statistics.fmean(mine), statistics.fmean(theirs)
    sd, df = pooled_sd([*(_run_levels(c.runs) for c in conf.candidates), mine])
    if sd is None:
        return a, b, None
    short = (b - a) if conf.maximize else (a - b)  # how far the baseline ended behind, in the metric's direction
    return a, b, short <= t95(df) * sd * math.sqrt(1 / len(mine) + 1 / len(theirs))
