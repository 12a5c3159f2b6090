"""Reports: compute the data first (``build_report``), then render it (CSV, JSON, terminal)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_batch.config import Config
from tune_batch.pareto import front_records

PARAM_COLUMNS = ("batch_size", "lr", "num_gpus")
METRIC_COLUMNS = ("samples_per_s", "device_util", "val_acc", "mfu", "peak_mem_bytes", "data_wait_frac",
                  "step_time_s", "timed_s", "duration_s")


@dataclass(frozen=True)
class Report:
    config: Config
    records: list[dict[str, Any]]
    front: list[dict[str, Any]]
    recommended: dict[str, Any] | None
    counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)


def latest_per_trial(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per trial_id (the last written wins), in first-seen order."""
    by_id: dict[Any, dict[str, Any]] = {}
    for r in records:
        by_id[r.get("trial_id")] = r
    return list(by_id.values())


def knee(front: list[dict[str, Any]], metrics: list[str], directions: list[str]) -> dict[str, Any] | None:
    """The recommended point: after scaling each objective to [0, 1] over the front (1 = best),
    the point closest (Euclidean) to the ideal point where every objective is at its best."""
    if not front:
        return None
    cols = [[float(r["metrics"][m]) for r in front] for m in metrics]
    scaled = []
    for col, d in zip(cols, directions):
        lo, hi = min(col), max(col)
        span = hi - lo
        s = [1.0 if span == 0 else (v - lo) / span for v in col]
        scaled.append(s if d == "maximize" else [1.0 - x for x in s])
    dist = [math.sqrt(sum((1.0 - scaled[k][i]) ** 2 for k in range(len(metrics)))) for i in range(len(front))]
    return front[min(range(len(front)), key=lambda i: (dist[i], i))]


def build_report(config: Config, records: list[dict[str, Any]], warnings: list[str] | None = None) -> Report:
    recs = latest_per_trial(records)
    front = front_records(recs, config.metric_names, config.directions)
    counts: dict[str, int] = {}
    for r in recs:
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    return Report(config, recs, front, knee(front, config.metric_names, config.directions), counts, list(warnings or []))


def row(rec: dict[str, Any]) -> dict[str, Any]:
    """A flat row of one record (CSV / table)."""
    params, metrics, info = rec.get("params") or {}, rec.get("metrics") or {}, rec.get("info") or {}
    out: dict[str, Any] = {"trial_id": rec.get("trial_id"), "status": rec.get("status"), "reason": rec.get("reason") or ""}
    out.update({k: params.get(k) for k in PARAM_COLUMNS})
    out.update({k: metrics.get(k) for k in METRIC_COLUMNS})
    out["duration_s"] = rec.get("duration_s")
    out["device"] = info.get("device", "")
    out["host"] = info.get("host", "")
    extras = {k: v for k, v in params.items() if k not in PARAM_COLUMNS}
    out["extra_params"] = json.dumps(extras) if extras else ""
    return out


def write_files(report: Report, run_dir: str | Path) -> list[Path]:
    """Write results.csv and pareto.json into ``run_dir``; returns the paths written."""
    run_dir = Path(run_dir)
    rows = [row(r) for r in report.records]
    csv_path = run_dir / "results.csv"
    fields = list(rows[0]) if rows else ["trial_id", "status", "reason", *PARAM_COLUMNS, *METRIC_COLUMNS]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    pareto_path = run_dir / "pareto.json"
    payload = {
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in report.config.objectives],
        "recommended_trial_id": report.recommended.get("trial_id") if report.recommended else None,
        "recommendation_method": "knee: closest to the ideal point after scaling each objective to [0, 1] over the front",
        "trials": report.front,
    }
    pareto_path.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    return [csv_path, pareto_path]


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


def render_table(report: Report) -> str:
    """The front as a text table, the recommended row marked with '*'."""
    metrics = report.config.metric_names
    cols = ["", "trial", *PARAM_COLUMNS, *metrics]
    if "peak_mem_bytes" not in metrics:
        cols.append("peak_mem_bytes")
    lines_data = []
    for r in sorted(report.front, key=lambda r: (r["params"]["num_gpus"], r["params"]["batch_size"], r["params"]["lr"])):
        mark = "*" if report.recommended is not None and r is report.recommended else ""
        vals = [mark, str(r.get("trial_id"))]
        vals += [_fmt(r["params"].get(k), k) for k in PARAM_COLUMNS]
        vals += [_fmt(r["metrics"].get(m), m) for m in cols[len(PARAM_COLUMNS) + 2:]]
        lines_data.append(vals)
    widths = [max(len(c), *(len(v[i]) for v in lines_data)) if lines_data else len(c) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(vals, widths)) for vals in lines_data]
    return "\n".join(out)


def render_summary(report: Report) -> str:
    c = report.counts
    total = sum(c.values())
    parts = [f"{total} trials"] + [f"{k} {c[k]}" for k in ("ok", "oom", "skipped", "failed") if c.get(k)]
    lines = [", ".join(parts) + f"; Pareto front: {len(report.front)} configuration(s)"]
    lines += [f"warning: {w}" for w in report.warnings]
    if report.front:
        objs = ", ".join(f"{o.direction} {o.metric}" for o in report.config.objectives)
        lines.append(f"Pareto front ({objs}); * = recommended (knee)")
        lines.append(render_table(report))
        rec = report.recommended
        if rec is not None:
            p = rec["params"]
            lines.append(f"recommended: batch_size={p['batch_size']} lr={p['lr']:.3g} num_gpus={p['num_gpus']} (trial {rec['trial_id']})")
    else:
        lines.append("no feasible trial: nothing is on the Pareto front (see results.csv for the reasons)")
    return "\n".join(lines)
