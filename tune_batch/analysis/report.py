"""The report of a search as data (``build_report``): the front, the recommendation, the noise
and what each front point trades. Its text forms are ``output.text``; drawing is
``output.html``; writing files is ``output.files``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tune_batch.analysis.headroom import Headroom, headroom, keep_margin
from tune_batch.analysis.noise import beyond, chance_floor
from tune_batch.analysis.notes import Note, NoteKind
from tune_batch.analysis.pareto import (
    KNEE_METHOD,
    Prefer,
    choose,
    hypervolume,
    noisy_non_dominated,
    normalise,
    within_noise,
)
from tune_batch.analysis.points import NoiseLevel, Point, group_runs, noise_levels, points, step_key
from tune_batch.config import Config, sizes
from tune_batch.config.metrics import OBJECTIVE_METRICS, is_evaluated
from tune_batch.measure.oom import cap_bytes
from tune_batch.store.records import Status, TrialResult


@dataclass(frozen=True)
class Report:
    config: Config
    records: list[TrialResult]  # the searched trials (one per trial id)
    front: list[TrialResult]
    recommended: TrialResult | None
    counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    method: str = KNEE_METHOD
    hypervolume: float = 0.0
    tradeoffs: dict[Any, list[str]] = field(default_factory=dict)  # front trial id -> what it trades
    points: dict[Any, Point] = field(default_factory=dict)  # trial id -> its runs' statistics
    noise: dict[str, NoiseLevel] = field(default_factory=dict)
    notes: tuple[Note, ...] = ()  # within-noise pairs, the accuracy trade, ... (each with its kind)
    repeats: list[TrialResult] = field(default_factory=list)  # runs of front candidates with other seeds
    learned: bool = True  # some measured config got beyond chance accuracy (see nothing_learned)
    confirmation: Any = None  # confirm.Confirmation, when confirmation runs exist
    confirm_runs: list[TrialResult] = field(default_factory=list)
    baseline: Any = None  # baseline.Baseline: the user's current config confirmed beside the candidates

    @property
    def baseline_kept(self) -> bool:
        """Whether the recommendation is the user's baseline (its first confirmation run stands for
        it: a config the search did not propose), kept because it was sooner than the search's pick."""
        return self.recommended is not None and self.baseline is not None and self.baseline.kept

    @property
    def recommended_on_front(self) -> bool | None:
        """Whether the recommended config is on the front (a confirmed one need not be); None
        without one, or where no short trial measured it (the user's baseline, a candidate's
        horizon-scaled rate: a confirmation run stands for it)."""
        if self.recommended is None or self.recommended.info.confirm_of is not None:
            return None
        return any(r.trial_id == self.recommended.trial_id for r in self.front)

    def runs_of(self, r: TrialResult) -> list[TrialResult]:
        """Every run of ``r``'s config: its trial and repeats, and its confirmation runs (for a
        confirmation run, such as the baseline's, every confirmation run of its config)."""
        if r.info.confirm_of is not None and r.trial_id not in self.points:
            return [c for c in self.confirm_runs if c.info.confirm_of == r.info.confirm_of]
        p = self.points.get(r.trial_id)
        confirmed = (c for c in self.confirm_runs if c.info.confirm_of == r.trial_id)
        return [*(p.runs if p is not None else (r,)), *confirmed]

    def headroom(self, r: TrialResult) -> Headroom:
        """How close ``r``'s config runs to the memory limit, over all its runs."""
        return headroom(self.config, self.runs_of(r))

    def stat(self, r: TrialResult, metric: str) -> tuple[float | None, float | None]:
        """(mean over the config's runs, over its step's for STEP_WORK, 95 % half-width) of a
        metric; the trial's own value when the config has no statistics."""
        p = self.points.get(r.trial_id)
        if p is not None and metric in p.mean:
            return p.mean[metric], p.ci.get(metric)
        return r.metrics.value(metric), None

    @property
    def why_none(self) -> str | None:
        """Why nothing is recommended, in a few words; None where something is."""
        if self.recommended is not None:
            return None
        if not self.front:
            return "no feasible trial"
        if not self.learned:
            return "nothing was learned: no config got beyond chance"
        said = [n.text for n in self.notes if "no recommendation" in n.text]
        if said:
            return said[-1]
        return self.method.split(": ", 1)[1] if ": " in (self.method or "") else "see tune-batch report RUN_DIR"

    def measured(self, r: TrialResult) -> str:
        """``r``'s objectives as the front shows them: the mean over its config's runs with the
        95 % half-width (the step-work metrics over every run of its step), and how many runs."""
        p = self.points.get(r.trial_id)
        figures = []
        for m in self.config.metric_names:
            value, ci = self.stat(r, m)
            if value is not None:
                figures.append(f"{m}={value:.4g}" + (f" +- {ci:.3g}" if ci is not None else ""))
        if p is None:
            what = ("the baseline's first confirmation run, at length: the search did not measure it at the trial "
                    "budget" if r.info.confirm_of is not None else "one run; its noise unknown")
            return ", ".join(figures) + f" ({what})"
        steps = f"; {p.step_runs} run(s) of its step for samples/s" if p.step_runs > p.n else ""
        return ", ".join(figures) + (f" (at the trial budget, {self.config.budget.train_samples} samples: mean +- 95 % "
                                     f"half-width over {p.n} run(s){steps})")

    def confirmed(self, r: TrialResult) -> str | None:
        """What ``r``'s confirmation runs at length measured, where it was confirmed: its time to
        the target (median over the runs that reached it, and how many did) and its final value."""
        conf = self.confirmation
        c = next((c for c in conf.candidates if c.trial.trial_id == r.trial_id), None) if conf is not None else None
        if c is None:
            return None
        n = len(c.runs)
        got = (f"reached {conf.metric} {conf.target:.4g} in {c.time_to_target_s:.2f} s of training"
               if c.time_to_target_s is not None and conf.target is not None else "did not reach the target")
        return (f"confirmed at {conf.train_samples:.0f} samples: {got} ({c.reached} of {n} run(s) reached it); "
                f"final {conf.metric} {c.final_acc:.4g}")


def latest_per_trial(records: Sequence[TrialResult]) -> list[TrialResult]:
    """One record per trial_id (the last written wins), in first-seen order."""
    by_id: dict[Any, TrialResult] = {}
    for r in records:
        by_id[r.trial_id] = r
    return list(by_id.values())


def _pm(ci: float | None, fmt: str) -> str:
    return f" +- {ci:{fmt}}" if ci is not None else ""


def tradeoffs(report: Report, point: TrialResult, rec: TrialResult, cap: float | None = None) -> list[str]:
    """What ``point`` gains and loses against the recommended ``rec``, in the seed's terms, each
    with its noise (+- the two points' half-widths combined)."""
    if point is rec:
        return ["recommended"]
    out = []
    (a_s, a_sc), (b_s, b_sc) = report.stat(point, "samples_per_s"), report.stat(rec, "samples_per_s")
    if step_key(point) == step_key(rec):  # one throughput, measured by both: no ratio to state
        out.append("the same samples/s (the same step, another learning rate)")
    elif a_s and b_s:
        # a ratio's interval: ratio x exp(+-w), w the two relative half-widths combined (the half-width
        # of the log ratio); "0.83x +- 0.94" read as an interval reaching below zero
        ratio = a_s / b_s
        w = math.hypot((a_sc or 0) / a_s, (b_sc or 0) / b_s) if (a_sc or b_sc) else None
        if w is not None and abs(math.log(ratio)) <= w:
            pace = "the same per epoch within noise"  # "1.00x +- 0.09 (slower per epoch)" claimed a side
        else:
            pace = f"{'faster' if ratio >= 1 else 'slower'} per epoch"
        span = f" ({ratio * math.exp(-w):.3g}-{ratio * math.exp(w):.3g})" if w is not None else ""
        out.append(f"{ratio:.2f}x{span} samples/s ({pace})")
    names = report.config.metric_names
    # the quality the user chose (val_acc, or any val_* / eval_* the evaluation returns: a loss
    # user saw no loss in these lines); utilization only where it is an objective (on a CPU it is
    # a diagnostic of the machine, not a property of the config)
    quality = ["val_acc"] + [m for m in names if is_evaluated(m)]
    for metric, label in [(m, m) for m in quality] + [("device_util", "utilization")] * ("device_util" in names):
        (a, ac), (b, bc) = report.stat(point, metric), report.stat(rec, metric)
        if a is not None and b is not None:
            both = math.hypot(ac or 0, bc or 0) if (ac is not None or bc is not None) else None
            fmt = ".3f" if metric in OBJECTIVE_METRICS else ".3g"
            out.append(f"{a - b:+{fmt}}{_pm(both, fmt)} {label}")
    a_m, b_m = point.metrics.peak_mem_bytes, rec.metrics.peak_mem_bytes
    if a_m is not None and b_m is not None:
        d = a_m - b_m
        if abs(d) <= 0.01 * max(a_m, b_m):  # a few hundred bytes of a 28 MiB peak: the same step's memory
            out.append("the same peak memory" + (f" (memory headroom {sizes.shown(cap - a_m)})" if cap else ""))
        else:
            out.append(f"memory headroom {sizes.shown(cap - a_m)} ({sizes.shown(-d, signed=True)})" if cap
                       else f"{sizes.shown(d, signed=True)} peak memory")
    return out


ACCURACY_SLACK = 0.05  # a recommendation this far below the best val_acc must be faster beyond noise


def _accuracy_guard(report_points: list[Point], front_pts: list[Point], k: int,
                    metrics: list[str]) -> tuple[int, list[Note]]:
    """Keep the knee only if it is within ACCURACY_SLACK of the best feasible val_acc or faster
    than the most accurate front point beyond noise; else recommend that point. Says which."""
    if "val_acc" not in metrics or "samples_per_s" not in metrics or not front_pts:
        return k, []
    best_acc = max(p.mean["val_acc"] for p in report_points if "val_acc" in p.mean)
    rec = front_pts[k]
    if rec.mean["val_acc"] >= best_acc - ACCURACY_SLACK:
        return k, []
    top = max(range(len(front_pts)), key=lambda i: front_pts[i].mean["val_acc"])
    acc_gap = front_pts[top].mean["val_acc"] - rec.mean["val_acc"]
    ratio = rec.mean["samples_per_s"] / front_pts[top].mean["samples_per_s"]
    if beyond(rec.mean["samples_per_s"], front_pts[top].mean["samples_per_s"], rec.ci.get("samples_per_s"),
              front_pts[top].ci.get("samples_per_s")):
        return k, [Note(NoteKind.PICK, f"trade: the recommendation gives up {acc_gap:.3f} val_acc against trial "
                                       f"{front_pts[top].trial.trial_id} for {ratio:.2f}x samples/s "
                                       f"(faster beyond noise)")]
    return top, [Note(NoteKind.PICK, f"trial {front_pts[top].trial.trial_id} recommended instead of the knee (trial "
                                     f"{rec.trial.trial_id}): the knee was {acc_gap:.3f} below the best val_acc and "
                                     f"not faster beyond noise ({ratio:.2f}x)")]


def _within_noise_notes(front_pts: list[Point], k: int | None, metrics: list[str]) -> list[Note]:
    """One line naming the front points within noise of the recommended one in every objective."""
    if k is None:
        return []
    rec = front_pts[k]
    same = [str(p.trial.trial_id) for p in front_pts if p is not rec and within_noise(
        [rec.mean[m] for m in metrics], [p.mean[m] for m in metrics], [rec.ci.get(m) for m in metrics],
        [p.ci.get(m) for m in metrics])]
    if not same:
        return []
    return [Note(NoteKind.PICK, f"within noise of the recommended trial {rec.trial.trial_id} in every objective: "
                                f"trial(s) {', '.join(same)}; more seeds (repeats.seeds) or a longer budget would "
                                f"tell them apart")]


def nothing_learned(config: Config, pts: list[Point], records: Sequence[TrialResult]) -> str | None:
    """One line when no measured config got beyond chance: the most accurate one's val_acc within
    noise of the majority-class rate of the validation set (or 1 / num_classes where that is
    unknown). Every config, not the front's alone: where val_acc's pooled noise is wide, fast
    configs near chance can dominate an accurate slower one off the front (a waves_conv1d search
    had a front of five configs at 0.17-0.39 and, off it, a config at 0.74 over 3 seeds)."""
    if "val_acc" not in config.metric_names or not pts:
        return None
    chance, floor = chance_floor(config, records)
    best = max(pts, key=lambda p: p.mean["val_acc"])
    # the seeds' spread where measured, and at least the binomial sampling noise of the validation set
    if best.mean["val_acc"] - max(best.ci.get("val_acc") or 0.0, floor - chance) > chance:
        return None
    return (f"nothing was learned: the best val_acc of any trial, {best.mean['val_acc']:.3f} "
            f"(trial {best.trial.trial_id}), "
            f"is within noise of chance ({chance:.3f}, the majority class); no recommendation from these trials "
            f"(a longer budget.train_samples or confirmation runs would tell)")


def build_report(config: Config, records: Sequence[TrialResult], warnings: list[str] | None = None,
                 prefer: Prefer = None) -> Report:
    """The front of the searched configs (their runs' means; a difference inside the noise does
    not dominate), the recommendation, the noise and what each front point trades."""
    latest = [r for r in latest_per_trial(records) if r.info.confirm_of is None]
    searched = [r for r in latest if r.searched]
    metrics, directions = config.metric_names, config.directions
    groups = group_runs(latest)
    # no config measured twice: no repeats asked for, or (a search stopped early) none run yet
    rep = config.repeats
    why = ("repeats.seeds = 0" if not rep.seeds else "repeats.candidates = 0" if not rep.candidates else
           "the repeats of front candidates have not run" if not any(r.info.repeat_of is not None for r in latest)
           else "none of the repeats finished ok")
    noise = noise_levels(groups, metrics, why)
    all_pts = points(groups, metrics, noise)
    feas = [p for p in all_pts if all(m in p.mean for m in metrics)]
    vals = [[p.mean[m] for m in metrics] for p in feas]
    idx = noisy_non_dominated(vals, [[p.ci.get(m) for m in metrics] for p in feas], directions)
    front_pts = [feas[i] for i in idx]
    bounds = [(min(col), max(col)) for col in zip(*vals)] if vals else None
    k, method = choose([vals[i] for i in idx], metrics, directions, prefer, bounds)
    notes: list[Note] = []
    if k is not None and prefer is None:
        k, notes = _accuracy_guard(feas, front_pts, k, metrics)
    rec, margin_notes = keep_margin(config, front_pts, feas, k, _chooser(metrics, directions, prefer, bounds))
    if margin_notes:  # the knee's notes were about another point
        notes = [Note(NoteKind.MEMORY, n) for n in margin_notes]
        k = next((i for i, p in enumerate(front_pts) if p is rec), None)
    notes += _within_noise_notes(front_pts, k, metrics)
    unmeasured = [r for r in searched if r.status is Status.OK and not r.metrics.has_finite(metrics)]
    if unmeasured:
        missing = sorted({m for r in unmeasured for m in metrics if r.metrics.value(m) is None
                          or not math.isfinite(r.metrics.value(m) or 0.0)})
        why = next((r.info.device_util_note for r in unmeasured if r.info.device_util_note), None)
        notes.append(Note(NoteKind.DATA, f"{len(unmeasured)} ok trial(s) lack an objective ({', '.join(missing)}"
                          + (f": {why}" if why else "") + "): measured, but not on the front"))
    empty = nothing_learned(config, feas, latest)
    if empty:
        rec, notes = None, [Note(NoteKind.PICK, empty)]
    counts: dict[str, int] = {}
    for r in searched:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    hv = hypervolume(normalise([vals[i] for i in idx], directions, bounds)) if idx else 0.0
    report = Report(config, searched, [p.trial for p in front_pts], rec.trial if rec is not None else None,
                    counts, list(warnings or []), method, hv, {}, {p.trial.trial_id: p for p in all_pts}, noise,
                    tuple(notes), [r for r in latest if r.info.repeat_of is not None], empty is None)
    return with_tradeoffs(report)


def with_tradeoffs(report: Report) -> Report:
    """``report`` with what each front point trades against its recommendation (none without one)."""
    rec = report.recommended
    if rec is None:
        return dataclasses.replace(report, tradeoffs={})
    cap = cap_bytes(report.config.resources.device_memory, None)
    return dataclasses.replace(report, tradeoffs={r.trial_id: tradeoffs(report, r, rec, cap) for r in report.front})


def _chooser(metrics: list[str], directions: list[str], prefer: Prefer,
             bounds: list[tuple[float, float]] | None) -> Callable[[Sequence[Point]], int | None]:
    """Chooses among some points as the front is chosen from: on their own front (noise respected)."""
    def choose_among(pool: Sequence[Point]) -> int | None:
        vals = [[p.mean[m] for m in metrics] for p in pool]
        idx = noisy_non_dominated(vals, [[p.ci.get(m) for m in metrics] for p in pool], directions)
        j, _ = choose([vals[i] for i in idx], metrics, directions, prefer, bounds)
        return idx[j] if j is not None else None

    return choose_among

