"""The report of a search as data (``build_report``), and its text forms (table, summary, CSV
rows). Drawing is ``report_html``; writing files is ``files``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tune_batch.config import Config
from tune_batch.confirm import chance_floor
from tune_batch.confirm import lines as confirm_lines
from tune_batch.noise import beyond
from tune_batch.oom import cap_bytes
from tune_batch.pareto import KNEE_METHOD, Prefer, choose, hypervolume, noisy_non_dominated, normalise, within_noise
from tune_batch.points import SHOWN_LEVELS, NoiseLevel, Point, group_runs, noise_levels, points, step_key
from tune_batch.records import Status, TrialResult

PARAM_COLUMNS = ("batch_size", "lr", "num_gpus")
METRIC_COLUMNS = ("samples_per_s", "device_util", "val_acc", "mfu", "model_flops_per_s", "peak_mem_bytes",
                  "data_wait_frac", "scaling_efficiency", "grad_noise_scale", "goodput", "step_time_s", "timed_s",
                  "duration_s")


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
    tradeoffs: dict[Any, list[str]] = field(default_factory=dict)
    points: dict[Any, Point] = field(default_factory=dict)  # trial id -> its runs' statistics
    noise: dict[str, NoiseLevel] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # within-noise pairs, the accuracy trade
    repeats: list[TrialResult] = field(default_factory=list)  # runs of front candidates with other seeds
    learned: bool = True  # some front point got beyond chance accuracy (see nothing_learned)
    confirmation: Any = None  # confirm.Confirmation, when confirmation runs exist
    confirm_runs: list[TrialResult] = field(default_factory=list)
    baseline: Any = None  # baseline.Baseline: the user's current config confirmed beside the candidates

    @property
    def recommended_on_front(self) -> bool | None:
        """Whether the recommended config is on the front (a confirmed one need not be)."""
        if self.recommended is None:
            return None
        return any(r.trial_id == self.recommended.trial_id for r in self.front)

    def stat(self, r: TrialResult, metric: str) -> tuple[float | None, float | None]:
        """(mean over the config's runs, over its step's for STEP_WORK, 95 % half-width) of a
        metric; the trial's own value when the config has no statistics."""
        p = self.points.get(r.trial_id)
        if p is not None and metric in p.mean:
            return p.mean[metric], p.ci.get(metric)
        return r.metrics.value(metric), None


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
        ratio = a_s / b_s
        rel = math.hypot((a_sc or 0) / a_s, (b_sc or 0) / b_s) * ratio if (a_sc or b_sc) else None
        out.append(f"{ratio:.2f}x{_pm(rel, '.2f')} samples/s ({'faster' if ratio >= 1 else 'slower'} per epoch)")
    for metric, label in (("val_acc", "val_acc"), ("device_util", "utilization")):
        if metric == "device_util" and metric not in report.config.metric_names:
            continue  # on a CPU a diagnostic of the machine, not a property of the config
        (a, ac), (b, bc) = report.stat(point, metric), report.stat(rec, metric)
        if a is not None and b is not None:
            both = math.hypot(ac or 0, bc or 0) if (ac is not None or bc is not None) else None
            out.append(f"{a - b:+.3f}{_pm(both, '.3f')} {label}")
    a_m, b_m = point.metrics.peak_mem_bytes, rec.metrics.peak_mem_bytes
    if a_m is not None and b_m is not None:
        d = (a_m - b_m) / 2**20
        out.append(f"memory headroom {(cap - a_m) / 2**20:.0f} MiB ({-d:+.0f} MiB)" if cap else f"{d:+.0f} MiB peak memory")
    return out


ACCURACY_SLACK = 0.05  # a recommendation this far below the best val_acc must be faster beyond noise


def _accuracy_guard(report_points: list[Point], front_pts: list[Point], k: int,
                    metrics: list[str]) -> tuple[int, list[str]]:
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
        return k, [f"trade: the recommendation gives up {acc_gap:.3f} val_acc against trial "
                   f"{front_pts[top].trial.trial_id} for {ratio:.2f}x samples/s (faster beyond noise)"]
    return top, [f"trial {front_pts[top].trial.trial_id} recommended instead of the knee (trial {rec.trial.trial_id}): "
                 f"the knee was {acc_gap:.3f} below the best val_acc and not faster beyond noise ({ratio:.2f}x)"]


def _within_noise_notes(front_pts: list[Point], k: int | None, metrics: list[str]) -> list[str]:
    """One line naming the front points within noise of the recommended one in every objective."""
    if k is None:
        return []
    rec = front_pts[k]
    same = [str(p.trial.trial_id) for p in front_pts if p is not rec and within_noise(
        [rec.mean[m] for m in metrics], [p.mean[m] for m in metrics], [rec.ci.get(m) for m in metrics],
        [p.ci.get(m) for m in metrics])]
    if not same:
        return []
    return [f"within noise of the recommended trial {rec.trial.trial_id} in every objective: trial(s) "
            f"{', '.join(same)}; more seeds (repeats.seeds) or a longer budget would tell them apart"]


def nothing_learned(config: Config, front_pts: list[Point], records: Sequence[TrialResult]) -> str | None:
    """One line when no front point got beyond chance: its val_acc within noise of the
    majority-class rate of the validation set (or 1 / num_classes where that is unknown)."""
    if "val_acc" not in config.metric_names or not front_pts:
        return None
    chance, floor = chance_floor(config, records)
    best = max(front_pts, key=lambda p: p.mean["val_acc"])
    # the seeds' spread where measured, and at least the binomial sampling noise of the validation set
    if best.mean["val_acc"] - max(best.ci.get("val_acc") or 0.0, floor - chance) > chance:
        return None
    return (f"nothing was learned: the best val_acc on the front, {best.mean['val_acc']:.3f} (trial {best.trial.trial_id}), "
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
    noise = noise_levels(groups, metrics)
    all_pts = points(groups, metrics, noise)
    feas = [p for p in all_pts if all(m in p.mean for m in metrics)]
    vals = [[p.mean[m] for m in metrics] for p in feas]
    idx = noisy_non_dominated(vals, [[p.ci.get(m) for m in metrics] for p in feas], directions)
    front_pts = [feas[i] for i in idx]
    bounds = [(min(col), max(col)) for col in zip(*vals)] if vals else None
    k, method = choose([vals[i] for i in idx], metrics, directions, prefer, bounds)
    notes: list[str] = []
    if k is not None and prefer is None:
        k, notes = _accuracy_guard(feas, front_pts, k, metrics)
    notes += _within_noise_notes(front_pts, k, metrics)
    unmeasured = [r for r in searched if r.status is Status.OK and not r.metrics.has_finite(metrics)]
    if unmeasured:
        missing = sorted({m for r in unmeasured for m in metrics if r.metrics.value(m) is None
                          or not math.isfinite(r.metrics.value(m) or 0.0)})
        why = next((r.info.device_util_note for r in unmeasured if r.info.device_util_note), None)
        notes.append(f"{len(unmeasured)} ok trial(s) lack an objective ({', '.join(missing)}"
                     + (f": {why}" if why else "") + "): measured, but not on the front")
    empty = nothing_learned(config, front_pts, latest)
    if empty:
        k, notes = None, [empty]
    counts: dict[str, int] = {}
    for r in searched:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    hv = hypervolume(normalise([vals[i] for i in idx], directions, bounds)) if idx else 0.0
    report = Report(config, searched, [p.trial for p in front_pts], front_pts[k].trial if k is not None else None,
                    counts, list(warnings or []), method, hv, {}, {p.trial.trial_id: p for p in all_pts}, noise,
                    notes, [r for r in latest if r.info.repeat_of is not None], empty is None)
    if report.recommended is not None:
        cap = cap_bytes(config.resources.device_memory, None)
        report.tradeoffs.update({r.trial_id: tradeoffs(report, r, report.recommended, cap) for r in report.front})
    return report


def row(rec: TrialResult, report: Report | None = None) -> dict[str, Any]:
    """A flat row of one record (CSV / table); with the report, each objective's mean over the
    config's runs, its half-width and the number of runs beside it."""
    p, m, info = rec.params, rec.metrics, rec.info
    out: dict[str, Any] = {"trial_id": rec.trial_id, "status": rec.status.value, "reason": rec.reason or ""}
    out.update(batch_size=p.batch_size, lr=p.lr, num_gpus=p.num_gpus)
    out.update({k: m.value(k) for k in METRIC_COLUMNS})
    out["samples_per_s_window_ci"] = m.samples_per_s_ci
    if report is not None:
        point = report.points.get(rec.trial_id)
        out["runs"] = point.n if point is not None else ""
        out["step_runs"] = point.step_runs if point is not None else ""
        for k in report.config.metric_names:
            mean, ci = report.stat(rec, k) if point is not None else (None, None)
            out[f"{k}_mean"], out[f"{k}_ci"] = mean, ci
    out["duration_s"] = rec.duration_s
    out["world_size"] = info.world_size or ""
    out["bottleneck"] = info.bottleneck or ""
    # CUDA with GPU Performance Monitoring: what device_util hides (empty elsewhere)
    out["sm_active"] = "" if info.sm_active is None else info.sm_active
    out["tensor_active"] = "" if info.tensor_active is None else info.tensor_active
    out["energy_j_per_sample"] = "" if m.energy_j_per_sample is None else m.energy_j_per_sample
    out["disturbed"] = "" if info.disturbed is None else info.disturbed
    out["device"] = info.device or ""
    out["host"] = info.host or ""
    out["extra_params"] = json.dumps(p.extra) if p.extra else ""
    return out


def _fmt(v: Any, metric: str) -> str:
    if v is None:
        return "-"
    if metric == "peak_mem_bytes":
        return f"{v / 2**20:.0f}MiB"
    if metric == "lr":
        return f"{v:.2e}"
    if metric in ("device_util", "val_acc", "mfu", "data_wait_frac"):
        return f"{v:.3f}"
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def _fmt_stat(report: Report, r: TrialResult, metric: str) -> str:
    mean, ci = report.stat(r, metric)
    return _fmt(mean, metric) + (f"+-{_fmt(ci, metric)}" if ci is not None and metric != "peak_mem_bytes" else "")


def render_table(report: Report) -> str:
    """The front as a text table (means over each config's runs, samples/s over its step's,
    +- 95 % half-widths, and the numbers of runs), the recommended row marked with '*'; a
    recommendation from confirmation runs that is not on the short-budget front is the last row,
    marked '*!'."""
    metrics = report.config.metric_names
    shown = [*metrics, *(["peak_mem_bytes"] if "peak_mem_bytes" not in metrics else [])]
    cols = ["", "trial", *PARAM_COLUMNS, *shown, "runs", "step_runs"]
    rows = []
    shown_trials = sorted(report.front, key=lambda r: (r.params.num_gpus, r.params.batch_size, r.params.lr))
    rec, on_front = report.recommended, report.recommended_on_front
    if rec is not None and not on_front:
        shown_trials.append(rec)  # chosen at length, off the short-budget front: shown last, marked
    for r in shown_trials:
        mark = ("*" if on_front else "*!") if r is rec else ""
        p, point = r.params, report.points.get(r.trial_id)
        rows.append([mark, str(r.trial_id), _fmt(p.batch_size, "batch_size"), _fmt(p.lr, "lr"),
                     _fmt(p.num_gpus, "num_gpus"), *(_fmt_stat(report, r, m) for m in shown),
                     str(point.n if point else 1), str(point.step_runs if point else 1)])
    widths = [max(len(c), *(len(v[i]) for v in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(vals, widths)) for vals in rows]
    return "\n".join(out)


def noise_lines(report: Report) -> list[str]:
    lines = []
    for m in report.config.metric_names:
        level = report.noise.get(m)
        if level is None:
            continue
        size = ("unknown" if level.half_width is None else
                f"+-{level.half_width:.1%} of the value" if level.relative else
                "+-" + ", ".join(f"{level.of(p, 1):.3f} at {p:g}" for p in SHOWN_LEVELS) if level.share else
                f"+-{level.half_width:.3f}")
        lines.append(f"noise {m}: {size} per run ({level.how})")
    if report.repeats:
        spent = sum(r.duration_s for r in report.repeats)
        total = spent + sum(r.duration_s for r in report.records)
        share = f" ({spent / total:.0%} of the search's trial-seconds)" if total else ""
        lines.append(f"repeats: {len(report.repeats)} run(s) of front candidates with other seeds, {spent:.0f} s{share}")
    return lines


def render_summary(report: Report) -> str:
    c = report.counts
    total = sum(c.values())
    # skips the sampler was asked again after: recorded and told to Optuna, no trial of the budget
    free = sum(1 for r in report.records if r.info.free_skip)
    note = {Status.SKIPPED: f" ({free} of them used no trial of budget.trials)"} if free else {}
    parts = [f"{total} trials"] + [f"{s.value} {c[s.value]}{note.get(s, '')}" for s in Status if c.get(s.value)]
    hv = f", hypervolume {report.hypervolume:.3f}" if report.front and report.hypervolume == report.hypervolume else ""
    lines = [report.baseline.line(report.confirmation.metric)] if report.baseline is not None else []
    lines.append(", ".join(parts) + f"; Pareto front: {len(report.front)} configuration(s){hv}")
    lines += [f"warning: {w}" for w in report.warnings]
    if not report.front:
        lines += report.notes
        lines.append("no feasible trial: nothing is on the Pareto front (see results.csv for the reasons)")
        return "\n".join(lines)
    objs = ", ".join(f"{o.direction} {o.metric}" for o in report.config.objectives)
    how = report.method.split(":")[0]
    lines.append(f"Pareto front ({objs}; mean +- 95 % half-width over each config's runs, samples/s over every "
                 f"run of its batch size, any lr: step_runs); * = recommended ({how})"
                 + ("; *! = recommended, not on the short-budget front" if report.recommended_on_front is False else ""))
    lines.append(render_table(report))
    lines += noise_lines(report)
    if report.confirmation is not None:
        lines += confirm_lines(report.confirmation)
    rec = report.recommended
    if rec is not None:
        p = rec.params
        lines.append(f"recommended: batch_size={p.batch_size} lr={p.lr:.3g} num_gpus={p.num_gpus} "
                     f"(trial {rec.trial_id}; {how})")
        lines += [f"  {line}" for line in tradeoff_lines(report)]
    lines += report.notes
    return "\n".join(lines)


def tradeoff_lines(report: Report) -> list[str]:
    """What each front point gains and loses against the recommended one (each +- its noise)."""
    rec = report.recommended
    return [f"trial {r.trial_id} instead (batch_size={r.params.batch_size} lr={r.params.lr:.3g}): "
            + ", ".join(report.tradeoffs.get(r.trial_id, [])) for r in report.front if rec is not None and r is not rec]
