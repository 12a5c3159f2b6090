"""Reports: compute the data first (``build_report``), then render it (CSV, JSON, terminal)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_batch.config import Config, dump_config
from tune_batch.errors import UserError
from tune_batch.oom import cap_bytes
from tune_batch.pareto import REFERENCE, front_hypervolume, front_records, normalise

PARAM_COLUMNS = ("batch_size", "lr", "num_gpus")
METRIC_COLUMNS = ("samples_per_s", "device_util", "val_acc", "mfu", "model_flops_per_s", "peak_mem_bytes",
                  "data_wait_frac", "scaling_efficiency", "step_time_s", "timed_s", "duration_s")


KNEE_METHOD = "knee: closest to the ideal point after scaling each objective to [0, 1] over the front"


@dataclass(frozen=True)
class Report:
    config: Config
    records: list[dict[str, Any]]
    front: list[dict[str, Any]]
    recommended: dict[str, Any] | None
    counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    method: str = KNEE_METHOD
    hypervolume: float = 0.0
    tradeoffs: dict[Any, list[str]] = field(default_factory=dict)


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


def parse_prefer(text: str | None, metrics: list[str]) -> str | dict[str, float] | None:
    """``--prefer``: a metric name, or weights ``metric=w,metric=w``. Raises UserError."""
    if not text:
        return None
    if "=" not in text:
        if text not in metrics:
            raise UserError(f"--prefer {text!r}: not an objective; allowed: {', '.join(metrics)} (or weights like samples_per_s=2,val_acc=1)")
        return text
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, w = part.partition("=")
        name = name.strip()
        if name not in metrics:
            raise UserError(f"--prefer {text!r}: {name!r} is not an objective; allowed: {', '.join(metrics)}")
        try:
            weights[name] = float(w)
        except ValueError as e:
            raise UserError(f"--prefer {text!r}: weight {w!r} of {name} is not a number") from e
        if weights[name] < 0:
            raise UserError(f"--prefer {text!r}: weights must be >= 0")
    if not any(weights.values()):
        raise UserError(f"--prefer {text!r}: at least one weight must be > 0")
    return weights


def recommend(front: list[dict[str, Any]], metrics: list[str], directions: list[str],
              prefer: str | dict[str, float] | None = None) -> tuple[dict[str, Any] | None, str]:
    """The recommended front point and how it was chosen: the knee by default, the best point
    in one metric (``prefer="samples_per_s"``), or the best weighted sum of the objectives
    scaled to [0, 1] over the front (``prefer={"samples_per_s": 2, "val_acc": 1}``)."""
    if not front or prefer is None:
        return knee(front, metrics, directions), KNEE_METHOD
    scaled = normalise([[r["metrics"][m] for m in metrics] for r in front], directions)
    if isinstance(prefer, str):
        k = metrics.index(prefer)
        kn = knee(front, metrics, directions)
        best = max(range(len(front)), key=lambda i: (scaled[i][k], front[i] is kn, -i))
        return front[best], f"prefer {prefer}: the front point best in {prefer}"
    w = [prefer.get(m, 0.0) for m in metrics]
    best = max(range(len(front)), key=lambda i: (sum(wi * u for wi, u in zip(w, scaled[i])), -i))
    shown = ", ".join(f"{m}={prefer[m]:g}" for m in metrics if m in prefer)
    return front[best], f"prefer weights {shown}: the best weighted sum of objectives scaled to [0, 1] over the front"


def tradeoffs(point: dict[str, Any], rec: dict[str, Any], cap_bytes: float | None = None) -> list[str]:
    """What ``point`` gains and loses against the recommended ``rec``, in the seed's terms."""
    if point is rec:
        return ["recommended"]
    a, b = point["metrics"], rec["metrics"]
    out = []
    if a.get("samples_per_s") and b.get("samples_per_s"):
        ratio = a["samples_per_s"] / b["samples_per_s"]
        out.append(f"{ratio:.2f}x samples/s ({'faster' if ratio >= 1 else 'slower'} per epoch)")
    if "val_acc" in a and "val_acc" in b:
        out.append(f"{a['val_acc'] - b['val_acc']:+.3f} val_acc")
    if "device_util" in a and "device_util" in b:
        out.append(f"{a['device_util'] - b['device_util']:+.3f} utilization")
    if "peak_mem_bytes" in a and "peak_mem_bytes" in b:
        d = (a["peak_mem_bytes"] - b["peak_mem_bytes"]) / 2**20
        if cap_bytes:
            out.append(f"memory headroom {(cap_bytes - a['peak_mem_bytes']) / 2**20:.0f} MiB ({-d:+.0f} MiB)")
        else:
            out.append(f"{d:+.0f} MiB peak memory")
    return out


def build_report(config: Config, records: list[dict[str, Any]], warnings: list[str] | None = None,
                 prefer: str | dict[str, float] | None = None) -> Report:
    recs = latest_per_trial(records)
    metrics, directions = config.metric_names, config.directions
    front = front_records(recs, metrics, directions)
    counts: dict[str, int] = {}
    for r in recs:
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    recommended, method = recommend(front, metrics, directions, prefer)
    hv = front_hypervolume(recs, metrics, directions) if len(metrics) <= 3 else float("nan")
    cap = cap_bytes(config.resources.device_memory, None)
    trade = {r.get("trial_id"): tradeoffs(r, recommended, cap) for r in front} if recommended else {}
    return Report(config, recs, front, recommended, counts, list(warnings or []), method, hv, trade)


def row(rec: dict[str, Any]) -> dict[str, Any]:
    """A flat row of one record (CSV / table)."""
    params, metrics, info = rec.get("params") or {}, rec.get("metrics") or {}, rec.get("info") or {}
    out: dict[str, Any] = {"trial_id": rec.get("trial_id"), "status": rec.get("status"), "reason": rec.get("reason") or ""}
    out.update({k: params.get(k) for k in PARAM_COLUMNS})
    out.update({k: metrics.get(k) for k in METRIC_COLUMNS})
    out["duration_s"] = rec.get("duration_s")
    out["world_size"] = info.get("world_size", "")
    out["bottleneck"] = info.get("bottleneck", "")
    # CUDA with GPU Performance Monitoring: what device_util hides (empty elsewhere)
    out["sm_active"] = info.get("sm_active", "")
    out["tensor_active"] = info.get("tensor_active", "")
    out["energy_j_per_sample"] = metrics.get("energy_j_per_sample", "")
    out["device"] = info.get("device", "")
    out["host"] = info.get("host", "")
    extras = {k: v for k, v in params.items() if k not in PARAM_COLUMNS}
    out["extra_params"] = json.dumps(extras) if extras else ""
    return out


def best_config_yaml(report: Report) -> str | None:
    """The recommended point as a full config file: the space narrowed to that point, one trial."""
    rec = report.recommended
    if rec is None:
        return None
    p = rec["params"]
    cfg = report.config
    space = cfg.space.model_copy(update={
        "batch_size": [int(p["batch_size"])],
        "lr": cfg.space.lr.model_copy(update={"low": float(p["lr"]), "high": float(p["lr"])}),
        "num_gpus": [int(p["num_gpus"])],
    })
    best = cfg.model_copy(update={"space": space, "budget": cfg.budget.model_copy(update={"trials": 1})})
    m = rec["metrics"]
    head = [
        f"# tune_batch recommendation from trial {rec.get('trial_id')} ({report.method})",
        f"# batch_size={p['batch_size']} lr={p['lr']:.6g} num_gpus={p['num_gpus']}",
        "# measured: " + ", ".join(f"{k}={m[k]:.4g}" for k in report.config.metric_names if k in m),
        "# the space below is that single point; 'tune-batch search' on this file re-measures it",
    ]
    return "\n".join(head) + "\n" + dump_config(best)


def write_files(report: Report, run_dir: str | Path) -> list[Path]:
    """Write results.csv, pareto.json, best.yaml and report.html into ``run_dir``; returns the
    paths written."""
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
        "recommendation_method": report.method,
        "hypervolume": report.hypervolume,
        "hypervolume_reference": f"each objective scaled to [0, 1] over the feasible trials (1 = best); reference point {REFERENCE} in every objective",
        "tradeoffs_vs_recommended": {str(k): v for k, v in report.tradeoffs.items()},
        "trials": report.front,
    }
    pareto_path.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    paths = [csv_path, pareto_path]
    best = best_config_yaml(report)
    best_path = run_dir / "best.yaml"
    if best is not None:
        best_path.write_text(best, encoding="utf-8")
        paths.append(best_path)
    elif best_path.exists():
        best_path.unlink()
    from tune_batch.report_html import render_html

    html_path = run_dir / "report.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    paths.append(html_path)
    return paths


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
    hv = f", hypervolume {report.hypervolume:.3f}" if report.front and report.hypervolume == report.hypervolume else ""
    lines = [", ".join(parts) + f"; Pareto front: {len(report.front)} configuration(s){hv}"]
    lines += [f"warning: {w}" for w in report.warnings]
    if report.front:
        objs = ", ".join(f"{o.direction} {o.metric}" for o in report.config.objectives)
        lines.append(f"Pareto front ({objs}); * = recommended ({report.method.split(':')[0]})")
        lines.append(render_table(report))
        rec = report.recommended
        if rec is not None:
            p = rec["params"]
            lines.append(f"recommended: batch_size={p['batch_size']} lr={p['lr']:.3g} num_gpus={p['num_gpus']} "
                         f"(trial {rec['trial_id']}; {report.method.split(':')[0]})")
            for r in report.front:
                if r is not rec:
                    pp = r["params"]
                    lines.append(f"  vs trial {r['trial_id']} (batch_size={pp['batch_size']} lr={pp['lr']:.3g}): "
                                 + ", ".join(report.tradeoffs.get(r.get("trial_id"), [])))
    else:
        lines.append("no feasible trial: nothing is on the Pareto front (see results.csv for the reasons)")
    return "\n".join(lines)
