"""The report of a search as data (``build_report``), and its text forms (table, summary, CSV
rows). Drawing is ``report_html``; writing files is ``files``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tune_batch.config import Config
from tune_batch.oom import cap_bytes
from tune_batch.pareto import KNEE_METHOD, Prefer, front, front_hypervolume, recommend
from tune_batch.records import Status, TrialResult

PARAM_COLUMNS = ("batch_size", "lr", "num_gpus")
METRIC_COLUMNS = ("samples_per_s", "device_util", "val_acc", "mfu", "model_flops_per_s", "peak_mem_bytes",
                  "data_wait_frac", "scaling_efficiency", "step_time_s", "timed_s", "duration_s")


@dataclass(frozen=True)
class Report:
    config: Config
    records: list[TrialResult]
    front: list[TrialResult]
    recommended: TrialResult | None
    counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    method: str = KNEE_METHOD
    hypervolume: float = 0.0
    tradeoffs: dict[Any, list[str]] = field(default_factory=dict)


def latest_per_trial(records: Sequence[TrialResult]) -> list[TrialResult]:
    """One record per trial_id (the last written wins), in first-seen order."""
    by_id: dict[Any, TrialResult] = {}
    for r in records:
        by_id[r.trial_id] = r
    return list(by_id.values())


def tradeoffs(point: TrialResult, rec: TrialResult, cap: float | None = None) -> list[str]:
    """What ``point`` gains and loses against the recommended ``rec``, in the seed's terms."""
    if point is rec:
        return ["recommended"]
    a, b = point.metrics, rec.metrics
    out = []
    if a.samples_per_s and b.samples_per_s:
        ratio = a.samples_per_s / b.samples_per_s
        out.append(f"{ratio:.2f}x samples/s ({'faster' if ratio >= 1 else 'slower'} per epoch)")
    if a.val_acc is not None and b.val_acc is not None:
        out.append(f"{a.val_acc - b.val_acc:+.3f} val_acc")
    if a.device_util is not None and b.device_util is not None:
        out.append(f"{a.device_util - b.device_util:+.3f} utilization")
    if a.peak_mem_bytes is not None and b.peak_mem_bytes is not None:
        d = (a.peak_mem_bytes - b.peak_mem_bytes) / 2**20
        if cap:
            out.append(f"memory headroom {(cap - a.peak_mem_bytes) / 2**20:.0f} MiB ({-d:+.0f} MiB)")
        else:
            out.append(f"{d:+.0f} MiB peak memory")
    return out


def build_report(config: Config, records: Sequence[TrialResult], warnings: list[str] | None = None,
                 prefer: Prefer = None) -> Report:
    recs = latest_per_trial(records)
    metrics, directions = config.metric_names, config.directions
    points = front(recs, metrics, directions)
    counts: dict[str, int] = {}
    for r in recs:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    recommended, method = recommend(points, metrics, directions, prefer)
    hv = front_hypervolume(recs, metrics, directions)
    cap = cap_bytes(config.resources.device_memory, None)
    trade = {r.trial_id: tradeoffs(r, recommended, cap) for r in points} if recommended else {}
    return Report(config, recs, points, recommended, counts, list(warnings or []), method, hv, trade)


def row(rec: TrialResult) -> dict[str, Any]:
    """A flat row of one record (CSV / table)."""
    p, m, info = rec.params, rec.metrics, rec.info
    out: dict[str, Any] = {"trial_id": rec.trial_id, "status": rec.status.value, "reason": rec.reason or ""}
    out.update(batch_size=p.batch_size, lr=p.lr, num_gpus=p.num_gpus)
    out.update({k: m.value(k) for k in METRIC_COLUMNS})
    out["duration_s"] = rec.duration_s
    out["world_size"] = info.world_size or ""
    out["bottleneck"] = info.bottleneck or ""
    # CUDA with GPU Performance Monitoring: what device_util hides (empty elsewhere)
    out["sm_active"] = "" if info.sm_active is None else info.sm_active
    out["tensor_active"] = "" if info.tensor_active is None else info.tensor_active
    out["energy_j_per_sample"] = "" if m.energy_j_per_sample is None else m.energy_j_per_sample
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


def render_table(report: Report) -> str:
    """The front as a text table, the recommended row marked with '*'."""
    metrics = report.config.metric_names
    shown = [*metrics, *(["peak_mem_bytes"] if "peak_mem_bytes" not in metrics else [])]
    cols = ["", "trial", *PARAM_COLUMNS, *shown]
    rows = []
    for r in sorted(report.front, key=lambda r: (r.params.num_gpus, r.params.batch_size, r.params.lr)):
        mark = "*" if r is report.recommended else ""
        p = r.params
        rows.append([mark, str(r.trial_id), _fmt(p.batch_size, "batch_size"), _fmt(p.lr, "lr"),
                     _fmt(p.num_gpus, "num_gpus"), *(_fmt(r.metrics.value(m), m) for m in shown)])
    widths = [max(len(c), *(len(v[i]) for v in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(vals, widths)) for vals in rows]
    return "\n".join(out)


def render_summary(report: Report) -> str:
    c = report.counts
    total = sum(c.values())
    parts = [f"{total} trials"] + [f"{s.value} {c[s.value]}" for s in Status if c.get(s.value)]
    hv = f", hypervolume {report.hypervolume:.3f}" if report.front and report.hypervolume == report.hypervolume else ""
    lines = [", ".join(parts) + f"; Pareto front: {len(report.front)} configuration(s){hv}"]
    lines += [f"warning: {w}" for w in report.warnings]
    if not report.front:
        lines.append("no feasible trial: nothing is on the Pareto front (see results.csv for the reasons)")
        return "\n".join(lines)
    objs = ", ".join(f"{o.direction} {o.metric}" for o in report.config.objectives)
    how = report.method.split(":")[0]
    lines.append(f"Pareto front ({objs}); * = recommended ({how})")
    lines.append(render_table(report))
    rec = report.recommended
    if rec is not None:
        p = rec.params
        lines.append(f"recommended: batch_size={p.batch_size} lr={p.lr:.3g} num_gpus={p.num_gpus} "
                     f"(trial {rec.trial_id}; {how})")
        for r in report.front:
            if r is not rec:
                lines.append(f"  vs trial {r.trial_id} (batch_size={r.params.batch_size} lr={r.params.lr:.3g}): "
                             + ", ".join(report.tradeoffs.get(r.trial_id, [])))
    return "\n".join(lines)
