"""report.html: one self-contained page (plotly.js inlined, works offline).

Panels: the parameter space (batch_size x lr, every trial, infeasible and failed ones grey with
their reason on hover), one scatter per pair of objectives (front points highlighted, the
recommended point starred), a parallel-coordinates view, and the trial table.
"""

from __future__ import annotations

import html
import json
import math
from itertools import combinations
from typing import Any

from tune_batch.confirm import lines as confirm_lines
from tune_batch.objectives import is_feasible
from tune_batch.records import Status, TrialResult
from tune_batch.report import Report, noise_lines, row, tradeoff_lines

STATUS_COLOURS = {Status.OK: "#1f77b4", Status.OOM: "#9e9e9e", Status.SKIPPED: "#c7c7c7",
                  Status.DIVERGED: "#bcbd22", Status.FAILED: "#7f7f7f"}


def _hover(r: TrialResult, metrics: list[str]) -> str:
    p = r.params
    lines = [f"trial {r.trial_id}: {r.status.value}", f"batch_size {p.batch_size}, lr {p.lr:.3g}, num_gpus {p.num_gpus}"]
    lines += [f"{k} {r.metrics.value(k):.4g}" for k in metrics if r.metrics.value(k) is not None]
    if r.reason:
        lines.append(html.escape(r.reason[:160]))
    return "<br>".join(lines)


def figure_data(report: Report) -> dict[str, Any]:
    """The plot's data, computed apart from drawing (tests check this)."""
    metrics = report.config.metric_names
    ok = [r for r in report.records if is_feasible(r, metrics)]
    front_ids = {r.trial_id for r in report.front}
    rec_id = report.recommended.trial_id if report.recommended else None
    pairs = list(combinations(metrics, 2)) if len(metrics) > 1 else []
    return {
        "metrics": metrics,
        "pairs": pairs,
        "all": report.records,
        "ok": ok,
        "front_ids": front_ids,
        "recommended_id": rec_id,
        # the points drawn as SVG markers: the parameter panel (every trial), each pair panel
        # (every ok trial) and the recommended star in each pair panel
        "n_points": len(report.records) + len(pairs) * len(ok) + (len(pairs) if rec_id is not None else 0),
    }


def _figure(report: Report, data: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics, pairs = data["metrics"], data["pairs"]
    n_panels = 1 + len(pairs)
    cols = min(3, n_panels)
    rows = math.ceil(n_panels / cols)
    titles = ["parameter space: batch_size x lr (grey: infeasible / failed)"] + [f"{b} vs {a}" for a, b in pairs]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.15)

    for status in Status:
        recs = [r for r in data["all"] if r.status is status]
        if not recs:
            continue
        fig.add_trace(go.Scatter(
            x=[r.params.batch_size for r in recs], y=[r.params.lr for r in recs], mode="markers",
            name=f"{status.value} ({len(recs)})", legendgroup=status.value,
            marker={"color": STATUS_COLOURS[status], "size": 10, "symbol": "circle" if status is Status.OK else "x"},
            hovertext=[_hover(r, metrics) for r in recs], hoverinfo="text"), row=1, col=1)
    fig.update_xaxes(type="log", title_text="batch_size", row=1, col=1)
    fig.update_yaxes(type="log", title_text="lr", row=1, col=1)

    ok, front_ids, rec_id = data["ok"], data["front_ids"], data["recommended_id"]
    for i, (a, b) in enumerate(pairs, start=1):
        r_, c_ = divmod(i, cols)
        r_, c_ = r_ + 1, c_ + 1
        colours = ["#d62728" if r.trial_id in front_ids else "#aec7e8" for r in ok]
        fig.add_trace(go.Scatter(
            x=[r.metrics.value(a) for r in ok], y=[r.metrics.value(b) for r in ok], mode="markers",
            name="feasible (red: Pareto front)", legendgroup="pairs", showlegend=i == 1,
            marker={"color": colours, "size": 10}, hovertext=[_hover(r, metrics) for r in ok], hoverinfo="text"),
            row=r_, col=c_)
        if rec_id is not None:
            rec = report.recommended
            fig.add_trace(go.Scatter(
                x=[rec.metrics.value(a)], y=[rec.metrics.value(b)], mode="markers", name="recommended",
                legendgroup="rec", showlegend=i == 1,
                marker={"symbol": "star", "size": 20, "color": "gold", "line": {"color": "black", "width": 1}},
                hovertext=[_hover(rec, metrics)], hoverinfo="text"), row=r_, col=c_)
        fig.update_xaxes(title_text=a, row=r_, col=c_)
        fig.update_yaxes(title_text=b, row=r_, col=c_)
    fig.update_layout(height=420 * rows, width=1350, title_text=f"tune_batch: {report.config.name}",
                      legend={"orientation": "h", "y": -0.08})
    return fig


def _parallel(report: Report, data: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    ok = data["ok"]
    if not ok:
        return None
    dims = [
        {"label": "log2 batch_size", "values": [math.log2(r.params.batch_size) for r in ok]},
        {"label": "log10 lr", "values": [math.log10(r.params.lr) for r in ok]},
        {"label": "num_gpus", "values": [r.params.num_gpus for r in ok]},
    ] + [{"label": m, "values": [r.metrics.value(m) for r in ok]} for m in data["metrics"]]
    colour = [1 if r.trial_id in data["front_ids"] else 0 for r in ok]
    fig = go.Figure(go.Parcoords(line={"color": colour, "colorscale": [[0, "#aec7e8"], [1, "#d62728"]]}, dimensions=dims))
    fig.update_layout(title_text="parallel coordinates (red: Pareto front)", height=420, width=1350)
    return fig


def _curves(report: Report) -> Any:
    """The confirmation runs' validation curves, training seconds on x, the target as a line."""
    conf = report.confirmation
    if conf is None or not conf.candidates:
        return None
    import plotly.graph_objects as go

    fig = go.Figure()
    for c in conf.candidates:
        p = c.trial.params
        for k, run in enumerate(c.runs):
            curve = run.info.curve or []
            fig.add_trace(go.Scatter(
                x=[0.0] + [row[1] for row in curve], y=[run.info.chance_acc or 0.0] + [row[2] for row in curve],
                mode="lines+markers", legendgroup=str(c.trial.trial_id), showlegend=k == 0,
                name=f"trial {c.trial.trial_id}: batch_size {p.batch_size}, lr {p.lr:.3g} (#{c.long_rank})",
                hovertext=[f"{row[0]:.0f} samples, {row[1]:.2f} s: val_acc {row[2]:.3f}" for row in curve]))
    if conf.target is not None:
        fig.add_hline(y=conf.target, line_dash="dash", annotation_text=f"target {conf.target:.3f}")
    fig.update_layout(title_text="confirmation at length: val_acc against training seconds (validation excluded)",
                      height=420, width=1350, xaxis_title="training seconds", yaxis_title="val_acc")
    return fig


def render_html(report: Report) -> str:
    """The whole page as a string."""
    import plotly.io as pio

    data = figure_data(report)
    parts = [pio.to_html(_figure(report, data), include_plotlyjs=True, full_html=False, div_id="tb-front")]
    par = _parallel(report, data)
    if par is not None:
        parts.append(pio.to_html(par, include_plotlyjs=False, full_html=False, div_id="tb-parallel"))
    curves = _curves(report)
    if curves is not None:
        parts.append(pio.to_html(curves, include_plotlyjs=False, full_html=False, div_id="tb-curves"))
    rows_ = [row(r, report) for r in report.records]
    cols = list(rows_[0]) if rows_ else []
    table = ["<table id='tb-trials'><thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr></thead><tbody>"]
    front_ids = data["front_ids"]
    for rec, r in zip(report.records, rows_):
        cls = "front" if rec.trial_id in front_ids else rec.status.value
        if report.recommended is not None and rec is report.recommended:
            cls += " recommended"
        cells = "".join(f"<td>{html.escape(_cell(r[c]))}</td>" for c in cols)
        table.append(f"<tr class='{cls}'>{cells}</tr>")
    table.append("</tbody></table>")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items()))
    rec = report.recommended
    rec_line = (f"recommended: trial {rec.trial_id}: batch_size {rec.params.batch_size}, lr {rec.params.lr:.4g}, "
                f"num_gpus {rec.params.num_gpus} ({html.escape(report.method)})" if rec else "no recommendation" if report.front else "no feasible trial")
    summary = json.dumps({"n_points": data["n_points"], "n_trials": len(report.records), "n_front": len(report.front)})
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>tune_batch report: {html.escape(report.config.name)}</title>
<style>
body {{ font-family: sans-serif; margin: 1em 2em; }}
table {{ border-collapse: collapse; font-size: 12px; }} td, th {{ border: 1px solid #ddd; padding: 2px 6px; }}
tr.oom, tr.skipped, tr.failed {{ color: #888; }} tr.front {{ background: #fde0e0; }} tr.recommended {{ background: #fff3b0; font-weight: bold; }}
</style></head><body>
<h1>tune_batch: {html.escape(report.config.name)}</h1>
<p>{len(report.records)} trials ({counts}); Pareto front: {len(report.front)}; hypervolume {report.hypervolume:.3f}.<br>{rec_line}</p>
{_noise_html(report)}
<script type="application/json" id="tb-summary">{summary}</script>
{''.join(parts)}
<h2>Trials</h2>
{''.join(table)}
</body></html>
"""


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _noise_html(report: Report) -> str:
    """The trade-offs (each +- its noise), the noise per objective and the notes, as a list."""
    conf = confirm_lines(report.confirmation) if report.confirmation is not None else []
    lines = [*noise_lines(report), *conf, *tradeoff_lines(report), *report.notes]
    if not lines:
        return ""
    return "<ul id='tb-noise'>" + "".join(f"<li>{html.escape(ln.strip())}</li>" for ln in lines) + "</ul>"
