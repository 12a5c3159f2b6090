"""The report's text forms: the front as a table, the summary a search prints (with the
confirmation in its words), and the flat row of one record (CSV, table). The report itself is
data (``analysis.report``)."""

from __future__ import annotations

import json
from typing import Any

from tune_batch.analysis.growth import describe
from tune_batch.analysis.headroom import growth_line
from tune_batch.analysis.notes import texts
from tune_batch.analysis.objectives import is_duplicate
from tune_batch.analysis.points import SHOWN_LEVELS
from tune_batch.analysis.report import Report
from tune_batch.config import sizes
from tune_batch.decide.confirm import Candidate, Confirmation, predictions, step_before
from tune_batch.decide.horizon import HORIZON, is_horizon
from tune_batch.store.records import Status, TrialResult

PARAM_COLUMNS = ("batch_size", "lr", "num_gpus")
METRIC_COLUMNS = ("samples_per_s", "device_util", "val_acc", "mfu", "model_flops_per_s", "peak_mem_bytes",
                  "peak_mem_worst_bytes", "data_wait_frac", "scaling_efficiency", "grad_noise_scale", "goodput",
                  "step_time_s", "timed_s", "duration_s")


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


def _fmt(v: Any, metric: str, digits: int = 4) -> str:
    if v is None:
        return "-"
    if metric == "peak_mem_bytes":
        return sizes.shown(v)
    if metric == "lr":
        return f"{v:.2e}"
    if metric in ("device_util", "val_acc", "mfu", "data_wait_frac"):
        return f"{v:.3f}"
    if isinstance(v, float):
        # throughputs in the hundreds keep one decimal; a loss of 1.249 or an MSE of 0.00316 keeps
        # four significant digits (".1f" showed them as "1.2+-0.0" and "0.0+-0.0")
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.{digits}g}"
    return str(v)


def _fmt_stat(report: Report, r: TrialResult, metric: str) -> str:
    mean, ci = report.stat(r, metric)
    shown_ci = ci is not None and metric != "peak_mem_bytes"
    return _fmt(mean, metric) + (f"+-{_fmt(ci, metric, digits=2)}" if shown_ci else "")


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
    if rec is not None and on_front is False:
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
        wide = ""
        if level.share and level.half_width is not None and (level.of(0.99, 1) or 0.0) > 0.4:
            # "+-0.500 at 0.99": the interval spans the whole scale, which says the noise is not yet known
            wide = "; the interval spans most of 0-1: too few runs with other seeds to measure this noise"
        lines.append(f"noise {m}: {size} per run ({level.how}){wide}")
    if report.repeats:
        spent = sum(r.duration_s for r in report.repeats)
        total = spent + sum(r.duration_s for r in report.records)
        share = f" ({spent / total:.0%} of the search's trial-seconds)" if total else ""
        lines.append(f"repeats: {len(report.repeats)} run(s) of front candidates with other seeds, "
                     f"{spent:.0f} s{share}")
    return lines


def render_summary(report: Report) -> str:
    c = report.counts
    total = sum(c.values())
    # skips the sampler was asked again after: recorded and told to Optuna, no trial of the budget
    free = sum(1 for r in report.records if r.info.free_skip)
    dups = sum(1 for r in report.records if is_duplicate(r))
    also = f", {dups} repeating a measured trial's params" if dups else ""
    note = {Status.SKIPPED: f" ({free} of them used no trial of budget.trials{also})"} if free else {}
    parts = [f"{total} trials"] + [f"{s.value} {c[s.value]}{note.get(s, '')}" for s in Status if c.get(s.value)]
    hv = f", hypervolume {report.hypervolume:.3f}" if report.front and report.hypervolume == report.hypervolume else ""
    lines = [report.baseline.line(report.confirmation.metric)] if report.baseline is not None else []
    lines.append(", ".join(parts) + f"; Pareto front: {len(report.front)} configuration(s){hv}")
    lines += [f"warning: {w}" for w in report.warnings]
    if not report.front:
        lines += texts(report.notes)
        lines.append("no feasible trial: nothing is on the Pareto front (see results.csv for the reasons)")
        return "\n".join(lines)
    objs = ", ".join(f"{o.direction} {o.metric}" for o in report.config.objectives)
    how = report.method.split(":")[0]
    lines.append(f"Pareto front ({objs}; mean +- 95 % half-width over each config's runs, samples/s over every "
                 f"run of its batch size, any lr: step_runs); * = recommended ({how})"
                 + ("; *! = recommended, not on the short-budget front"
                    if report.recommended_on_front is False else ""))
    lines.append(render_table(report))
    lines += noise_lines(report)
    if report.confirmation is not None:
        lines += confirm_lines(report.confirmation)
    rec = report.recommended
    if rec is not None:
        p = rec.params
        which = "the baseline, kept" if report.baseline_kept else f"trial {rec.trial_id}; {how}"
        lines.append(f"recommended: batch_size={p.batch_size} lr={p.lr:.3g} num_gpus={p.num_gpus} ({which})")
        room = report.headroom(rec)
        lines += [f"  {line}" for line in (growth_line(room), room.line()) if line]
        lines += [f"  {line}" for line in tradeoff_lines(report)]
    lines += texts(report.notes)
    return "\n".join(lines)


def tradeoff_lines(report: Report) -> list[str]:
    """What each front point gains and loses against the recommended one (each +- its noise)."""
    rec = report.recommended
    return [f"trial {r.trial_id} instead (batch_size={r.params.batch_size} lr={r.params.lr:.3g}): "
            + ", ".join(report.tradeoffs[r.trial_id]) for r in report.front
            if rec is not None and r is not rec and report.tradeoffs.get(r.trial_id)]


def _horizon_lines(x: Candidate) -> list[str]:
    """What a candidate is when it is another's config at a lower learning rate (``confirm.horizon_beta``)."""
    if not is_horizon(x.trial):
        return []
    return [f"trial {x.trial.trial_id[:-len(HORIZON)]}'s config at a lower learning rate, lr x (confirmation samples / "
            f"trial samples)^-beta (confirm.horizon_beta); no short trial measured it"]


def _memory_lines(conf: Confirmation, x: Candidate) -> list[str]:
    """Why a candidate's memory keeps it from being recommended: it grew (a leak?), or it leaves
    too little of the memory limit."""
    out = []
    grew = [g for r in x.runs if (g := r.info.memory_growth) and g.get("flagged")]
    if grew:
        g = max(grew, key=lambda g: g.get("bytes_per_1000_steps") or 0.0)
        passed = " (not recommended while another candidate's memory stays flat)" if conf.best is not x else ""
        out.append(f"{describe(g)} in {len(grew)} of its {len(x.runs)} run(s): a leak?{passed}")
    if x.trial.trial_id in conf.excluded:
        out.append(f"not recommended: {conf.excluded[x.trial.trial_id]}")
    return out


def _how_lines(conf: Confirmation) -> list[str]:
    """What the confirmation's length answers, and its rounds: escalated, a second look, a goal."""
    out = []
    if not conf.own_run and conf.target is not None:
        out.append(f"  this answers a run of {conf.train_samples:.0f} samples; for yours, give its length as "
                   f"goal.train_samples or goal.epochs, in place of confirm.train_samples (e.g. --set goal.epochs=10 "
                   f"--set confirm.train_samples=null; confirmation then trains that long): the learning rate "
                   f"soonest to an early target is often too high for a long run")
    if conf.rung > 1:
        out.append(f"  escalated: nothing was learned at shorter lengths; round {conf.rung} trained the better half of "
                   f"the round before 4x longer (confirm.escalations)")
    for gone, by in conf.replaced.items():
        out.append(f"  second look: trial {gone}'s runs did not reach the target; trial {by} was confirmed in its "
                   f"place (confirm.replace_unreached)")
    if conf.at_length:
        out.append(f"  goal: the best {conf.metric} after the run's {_length(conf)} decides (final value, mean over "
                   f"the runs)")
    return out


def _length(conf: Confirmation) -> str:
    """A confirmation run's length in the user's unit: samples, or epochs with their samples (the
    median run's: a run trains whole batches)."""
    samples = f"{conf.train_samples:.0f} samples"
    return samples if conf.epochs is None else f"{conf.epochs:g} epoch(s) ({samples})"


def confirm_lines(conf: Confirmation) -> list[str]:
    """The confirmation in the summary's words: per candidate its time to target (or that it
    never reached it), then the ranks' agreement."""
    goal = (f"target {conf.metric} {conf.target:.4g} ({conf.target_how})" if conf.target is not None
            else f"target {conf.target_how}")
    out = [f"confirmation: {len(conf.candidates)} candidate(s) trained for {_length(conf)}; {goal}"]
    stopped, runs = conf.stopped_at_target()
    if stopped:
        out.append(f"  {stopped} of {runs} run(s) ended at the target, before their length "
                   f"(confirm.stop_at_target): what follows it cannot change a time to it")
    out += _how_lines(conf)
    for x in conf.candidates:
        p = x.trial.params
        spread = ""
        hits = conf.run_times(x)
        if len(hits) > 1:
            spread = f" (runs {min(hits):.2f}-{max(hits):.2f} s)"
        reach = (f"reached in {x.time_to_target_s:.2f} s of training{spread}, {x.samples_to_target:.0f} samples"
                 if x.time_to_target_s is not None else f"never reached it (best {x.best_acc:.4g})")
        if conf.blend and x.estimate_s is not None and x.estimate_s != x.time_to_target_s:
            reach += f" (ranked at {x.estimate_s:.2f} s with its prediction)"
        if p.num_gpus > 1 and x.device_seconds_to_target is not None:
            reach += f", {x.device_seconds_to_target:.2f} device-s"
        if conf.at_length:
            reach += f"; final {conf.metric} {x.final_acc:.4g}"
        several = any(c.trial.params.num_gpus > 1 for c in conf.candidates)
        gpus = f" num_gpus={p.num_gpus}" if several else ""
        out.append(f"  #{x.long_rank} trial {x.trial.trial_id} (batch_size={p.batch_size} lr={p.lr:.3g}{gpus}; "
                   f"short-budget rank {x.short_rank}): {reach}; {x.reached} of {len(x.runs)} run(s) reached it")
        out += [f"    {line}" for line in (*_horizon_lines(x), *_memory_lines(conf, x))]
    counts = conf.gpu_counts()
    if len(counts) > 1:
        out.append("  by GPU count: " + "; ".join(_count_line(g, conf.metric, conf.maximize, counts) for g in counts))
    reached = [x for x in conf.candidates if x.time_to_target_s is not None]
    # those passed over for their memory (said above), not for their time
    best_grows = conf.best is not None and conf.best.grows
    eligible = [x for x in reached if x.trial.trial_id not in conf.excluded and (not x.grows or best_grows)]
    blend = conf.ranked_with_predictions()
    contenders = conf.contenders()
    if not conf.at_length and conf.blend and not blend and any(x.predicted for x in contenders):
        out.append(f"  ranked by their runs alone, without the predictions: trial(s) "
                   f"{', '.join(str(x.trial.trial_id) for x in conf.unpredicted(contenders))} reached the target "
                   f"with no usable prediction (no noise scale, or samples/s only from disturbed windows)")
    if conf.best is not None and eligible and conf.best is not eligible[0] and conf.at_length:
        first = eligible[0]
        out.append(f"  trial {conf.best.trial.trial_id} is recommended, not #{first.long_rank}: the goal asks for the "
                   f"best {conf.metric} at its length, not the soonest to the target")
    elif conf.best is not None and eligible and conf.best is not eligible[0] and blend:
        first = eligible[0]
        out.append(f"  trial {conf.best.trial.trial_id} is recommended, not #{first.long_rank}: its runs' time and "
                   f"its predicted time together ({conf.best.estimate_s:.2f} s) are the shortest; "
                   f"#{first.long_rank}'s runs were faster than its prediction ({first.estimate_s:.2f} s together; "
                   f"confirm.rank_by: runs ranks by the runs alone)")
    blended = min(eligible, key=lambda c: (c.ranked_by(False, blend) or 0.0, c.long_rank), default=None)
    if not conf.at_length and conf.best is not None and blended is not None and blended is not conf.best:
        est = blended.ranked_by(False, blend) or 0.0
        out.append(f"  trial {blended.trial.trial_id}'s prediction ranked it first ({est:.2f} s with its runs), but "
                   f"its runs reached the target later than trial {conf.best.trial.trial_id}'s beyond their "
                   f"spread: the runs decide")
    if len(reached) >= 2:
        a, b = reached[0], reached[1]
        res = max(step_before(r.info.curve or [], conf.target, conf.maximize) or 0.0 for r in (*a.runs, *b.runs))
        if b.time_to_target_s - a.time_to_target_s <= res:
            out.append(f"  the first two are within one validation interval ({res:.2f} s) of each other: more "
                       f"confirm.evaluations (or confirm.seeds) would tell them apart")
    if conf.agreement is not None:
        same = ("the short trials ranked these candidates as the long runs did" if conf.agreement == 1
                else "the short trials alone would have ranked them differently")
        out.append(f"  short vs long budget ranks: Kendall's tau {conf.agreement:+.2f} ({same})")
    pred = predictions(conf, [])
    shown = [f"trial {x['trial_id']} {x['predicted_s']:.2f} s vs {x['measured_s']:.2f} s"
             + (" (its samples/s only from disturbed windows)" if x["disturbed_throughput"] else "")
             for x in pred["confirmed"] if x["ratio"] is not None]
    if shown:
        out.append(f"  time to target predicted from the search's gradient noise scale (B_noise "
                   f"{pred['grad_noise_scale']:.0f} over {pred['grad_noise_scale_trials']} trials; leave one out) "
                   f"vs measured: {'; '.join(shown)} ({pred['within_1_5x']} within 1.5x)")
    for r in conf.failed:
        out.append(f"  confirmation run {r.trial_id} ended {r.status.value}: {r.reason}")
    return out


def _count_line(g: dict[str, Any], metric: str, maximize: bool, counts: list[dict[str, Any]]) -> str:
    eff = g["scaling_efficiency"]
    missing = " a worker, ".join(str(b) for b in g.get("no_one_worker_at") or [])
    why = f": no one-worker trial ran {missing} a worker" if missing else ""
    scale = f", scaling efficiency {eff:.2f}" if eff is not None else f", scaling efficiency not measured{why}"
    if g["time_to_target_s"] is None:
        # a count whose trials were all worse than another count's best: its answer is about the configs tried
        key = f"best_trial_{metric}"
        mine, best = g.get(key), (max if maximize else min)(
            (v for c in counts if (v := c.get(key)) is not None), default=None)
        tried = (f" (its trials' best {metric} {mine:.3g} after the trials, against {best:.3g} on another count: the "
                 f"configs tried there, not the count, may be why)"
                 if mine is not None and best is not None and mine != best else "")
        return f"{g['num_gpus']}: none of {g['candidates']} reached the target{tried}{scale}"
    return (f"{g['num_gpus']}: {g['time_to_target_s']:.2f} s wall, {g['device_seconds_to_target']:.2f} device-s "
            f"(trial {g['trial_id']}){scale}")
