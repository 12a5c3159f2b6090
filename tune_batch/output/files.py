"""Writes a report into a run directory: results.csv, pareto.json, best.yaml, report.html."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tune_batch.analysis.notes import texts
from tune_batch.analysis.pareto import REFERENCE
from tune_batch.analysis.report import Report
from tune_batch.config import dump_config
from tune_batch.output.html import render_html
from tune_batch.store.records import TrialResult
from tune_batch.store.rundir import replace_file


def best_config_yaml(report: Report) -> str | None:
    """The recommended point as a full config file: the space narrowed to that point, one trial."""
    rec = report.recommended
    if rec is None:
        return None
    p, cfg = rec.params, report.config
    space = cfg.space.model_copy(update={
        "batch_size": [p.batch_size],
        "lr": cfg.space.lr.model_copy(update={"low": p.lr, "high": p.lr}),
        "num_gpus": [p.num_gpus],
        # a kept baseline need not keep the search's rule for a worker's batch: the file must load
        "min_batch_per_gpu": min(cfg.space.min_batch_per_gpu, p.per_worker_batch),
    })
    best = cfg.model_copy(update={"space": space, "budget": cfg.budget.model_copy(update={"trials": 1})})
    room = report.headroom(rec)
    head = [
        f"# tune_batch recommendation from trial {rec.trial_id} ({report.method})",
        f"# batch_size={p.batch_size} lr={p.lr:.6g} num_gpus={p.num_gpus}",
        f"# measured in: {cfg.train.loop}" + ("" if cfg.train.loop == "tune_batch" else " (the user's own trainer; "
                                                 f"tune-batch export RUN_DIR --to {cfg.train.loop})"),
        "# measured: " + report.measured(rec),
        *([f"# {line}"] if (line := report.confirmed(rec)) else []),
        "# " + room.line(),
        "# memory_safety: " + yaml.safe_dump(room.to_dict(), default_flow_style=True, width=10**6).strip(),
        "# the space below is that single point; 'tune-batch search' on this file re-measures it",
    ]
    return "\n".join(head) + "\n" + dump_config(best)


def pareto_payload(report: Report) -> dict[str, object]:
    return {
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in report.config.objectives],
        "recommended_trial_id": report.recommended.trial_id if report.recommended else None,
        # false when confirmation at length chose a config off the short-budget front (see notes)
        "recommended_on_front": report.recommended_on_front,
        "recommendation_method": report.method,
        "hypervolume": report.hypervolume,
        "hypervolume_reference": f"each objective scaled to [0, 1] over the feasible trials (1 = best); "
                                 f"reference point {REFERENCE} in every objective",
        "tradeoffs_vs_recommended": {str(k): v for k, v in report.tradeoffs.items()},
        "noise": {m: level.to_dict() for m, level in report.noise.items()},
        "notes": texts(report.notes),
        "learned": report.learned,
        "confirmation": report.confirmation.to_dict(report.front) if report.confirmation is not None else None,
        "baseline": report.baseline.to_dict() if report.baseline is not None else None,
        "trials": [_front_entry(report, r) for r in report.front],
        # the recommended config's own entry: with confirmation it need not be on the short front
        "recommended": ({**_front_entry(report, report.recommended), **report.headroom(report.recommended).to_dict()}
                        if report.recommended else None),
    }


def _front_entry(report: Report, r: TrialResult) -> dict[str, object]:
    """A front trial's record, its metrics replaced by the means over the config's runs (its
    step's for STEP_WORK) with ``<metric>_ci`` (95 % half-width, null where the noise is
    unknown) beside each objective."""
    rec = r.to_record()
    point = report.points.get(r.trial_id)
    metrics = dict(rec["metrics"])
    for m in report.config.metric_names:
        metrics[m], metrics[f"{m}_ci"] = report.stat(r, m)
    rec["metrics"] = metrics
    rec["runs"] = [x.trial_id for x in point.runs] if point is not None else [r.trial_id]
    # samples/s and the other step-work metrics: every run of the same step, at any learning rate
    rec["step_runs"] = point.step_runs if point is not None else 1
    return rec


def write_files(report: Report, run_dir: str | Path) -> list[Path]:
    """Write results.csv, pareto.json, best.yaml and report.html into ``run_dir``, each whole or
    not at all (a reader never sees half a file); returns the paths written (best.yaml is removed
    when nothing is recommended)."""
    run_dir = Path(run_dir)
    from tune_batch.output.frames import write_csv

    csv_path = run_dir / "results.csv"
    write_csv(report.records + report.repeats + report.confirm_runs, report, csv_path)
    pareto_path = run_dir / "pareto.json"
    replace_file(pareto_path, json.dumps(pareto_payload(report), indent=2, default=str))
    paths = [csv_path, pareto_path]
    best, best_path = best_config_yaml(report), run_dir / "best.yaml"
    if best is not None:
        replace_file(best_path, best)
        paths.append(best_path)
    elif best_path.exists():
        best_path.unlink()
    html_path = run_dir / "report.html"
    replace_file(html_path, render_html(report))
    paths.append(html_path)
    return paths
