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

from tune_batch.analysis.objectives import is_feasible
from tune_batch.analysis.report import Report
from tune_batch.output.text import row
from tune_batch.output.views import axis_label
from tune_batch.store.records import Status, TrialResult

STATUS_COLOURS = {Status.OK: "#1f77b4", Status.OOM: "#9e9e9e", Status.SKIPPED: "#c7c7c7",
                  Status.DIVERGED: "#bcbd22", Status.FAILED: "#7f7f7f"}


def _hover(r: TrialResult, metrics: list[str]) -> str:
    p = r.params
    lines = [f"trial {r.trial_id}: {r.status.value}",
             f"batch_size {p.batch_size}, lr {p.lr:.3g}, num_gpus {p.num_gpus}"]
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
    cols = min(2, n_panels)
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
    sizes = sorted({r.params.batch_size for r in data["all"]})
    fig.update_xaxes(type="log", tickvals=sizes, ticktext=[str(b) for b in sizes], title_text="batch size (samples)",
                     row=1, col=1)
    fig.update_yaxes(type="log", title_text="learning rate (log)", row=1, col=1)

    ok, front_ids, rec_id = data["ok"], data["front_ids"], data["recommended_id"]
    for i, (a, b) in enumerate(pairs, start=1):
        r_, c_ = divmod(i, cols)
        r_, c_ = r_ + 1, c_ + 1
        colours = ["#d62728" if r.trial_id in front_ids else "#aec7e8" for r in ok]
        sa, sb = [report.stat(r, a) for r in ok], [report.stat(r, b) for r in ok]  # mean over runs, +- noise
        fig.add_trace(go.Scatter(
            x=[m for m, _ in sa], y=[m for m, _ in sb], mode="markers",
            error_x={"type": "data", "array": [c or 0.0 for _, c in sa], "visible": True, "thickness": 1},
            error_y={"type": "data", "array": [c or 0.0 for _, c in sb], "visible": True, "thickness": 1},
            name="feasible (red: Pareto front)", legendgroup="pairs", showlegend=i == 1,
            marker={"color": colours, "size": 10}, hovertext=[_hover(r, metrics) for r in ok], hoverinfo="text"),
            row=r_, col=c_)
        if rec_id is not None:
            rec = report.recommended
            fig.add_trace(go.Scatter(
                x=[report.stat(rec, a)[0]], y=[report.stat(rec, b)[0]], mode="markers", name="recommended",
                legendgroup="rec", showlegend=i == 1,
                marker={"symbol": "star", "size": 20, "color": "gold", "line": {"color": "black", "width": 1}},
                hovertext=[_hover(rec, metrics)], hoverinfo="text"), row=r_, col=c_)
        fig.update_xaxes(title_text=axis_label(a), row=r_, col=c_)
        fig.update_yaxes(title_text=axis_label(b), row=r_, col=c_)
    fig.update_layout(height=380 * rows + 60, autosize=True, legend={"orientation": "h", "y": -0.22 / rows},
                      margin={"b": 90})
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
    fig = go.Figure(go.Parcoords(line={"color": colour, "colorscale": [[0, "#aec7e8"], [1, "#d62728"]]},
                                 dimensions=dims))
    fig.update_layout(height=400, autosize=True)
    return fig


def _curves(report: Report) -> Any:
    """The confirmation runs' validation curves (the baseline's too), training seconds on x, the target as a line."""
    conf = report.confirmation
    if conf is None or not conf.candidates:
        return None
    import plotly.graph_objects as go

    fig = go.Figure()
    # the candidates', then the baseline's (dashed, grey): the config the user runs today beside them
    groups = [(str(c.trial.trial_id), f"trial {c.trial.trial_id}: batch_size {c.trial.params.batch_size}, lr "
               f"{c.trial.params.lr:.3g} (#{c.long_rank})", c.runs, {}) for c in conf.candidates]
    b = report.baseline
    runs = [r for r in b.runs if r.info.curve] if b is not None else []
    if b is not None and runs:
        groups.append(("baseline", f"baseline: batch_size {b.params.batch_size}, lr {b.params.lr:.3g}", runs,
                       {"line": {"dash": "dash", "color": "grey"}, "marker": {"color": "grey"}}))
    for group, name, runs, style in groups:
        for k, run in enumerate(runs):
            curve = run.info.curve or []
            # the untrained model's value where the run recorded it; chance for val_acc otherwise (a
            # loss curve drawn from 0 at the start read as if it had got worse with training)
            start = run.info.start_value
            if start is None and conf.metric == "val_acc":
                start = run.info.chance_acc or 0.0
            head = [] if start is None else [(0.0, start)]
            fig.add_trace(go.Scatter(
                x=[h[0] for h in head] + [row[1] for row in curve], y=[h[1] for h in head] + [row[2] for row in curve],
                mode="lines+markers", legendgroup=group, showlegend=k == 0, name=name, **style,
                hovertext=[f"untrained: {conf.metric} {h[1]:.4g}" for h in head]
                + [f"{row[0]:.0f} samples, {row[1]:.2f} s: {conf.metric} {row[2]:.4g}" for row in curve]))
    if conf.target is not None:
        fig.add_hline(y=conf.target, line_dash="dash", annotation_text=f"target {conf.target:.4g}")
    fig.update_layout(height=400, autosize=True, xaxis_title="training seconds (validation excluded)",
                      yaxis_title=conf.metric)
    return fig


def render_html(report: Report) -> str:
    """The whole page as a string: the answer first, then the seed's picture, accuracy over
    batch size x learning rate, the objective pairs, the curves and the table."""
    import plotly.io as pio

    from tune_batch.output.views import answer_html, heat_figure, heat_metric, seed_figure

    data = figure_data(report)
    heat = heat_metric(report)[0].replace("val_acc", "Accuracy")
    views = [("tb-seed", "Throughput and memory against batch size", seed_figure(report)),
             ("tb-heat", f"{heat} over batch size and learning rate", heat_figure(report)),
             ("tb-front", "Objectives against each other, and every trial", _figure(report, data)),
             ("tb-parallel", "Every feasible trial across parameters and objectives (red: Pareto front)",
              _parallel(report, data)),
             ("tb-curves", "Confirmation at length", _curves(report))]
    parts, first = [], True
    for div, heading, fig in views:
        if fig is None:
            continue
        plot = pio.to_html(fig, include_plotlyjs=first, full_html=False, div_id=div, config={"responsive": True})
        parts.append(f"<h2>{heading}</h2><div class='plot'>{plot}</div>")
        first = False
    rows_ = [{**row(r, report), **{m: r.metrics.value(m) for m in report.config.metric_names}}
             for r in report.records]
    # the objectives first (a loss config's eval_loss sat past a screen of empty val_acc and mfu
    # columns), then the rest; a column empty in every row is left out
    lead = ["trial_id", "status", "reason", "batch_size", "lr", "num_gpus",
            *(c for m in report.config.metric_names for c in (m, f"{m}_mean", f"{m}_ci"))]
    cols = [c for c in dict.fromkeys([*lead, *(rows_[0] if rows_ else [])])
            if any(r.get(c) not in (None, "") for r in rows_)]
    table = ["<div class='scroll'><table id='tb-trials'><thead><tr>"
             + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr></thead><tbody>"]
    front_ids = data["front_ids"]
    for rec, r in zip(report.records, rows_):
        cls = "front" if rec.trial_id in front_ids else rec.status.value
        if report.recommended is not None and rec is report.recommended:
            cls += " recommended"
        cells = "".join(f"<td>{html.escape(_cell(r[c]))}</td>" for c in cols)
        table.append(f"<tr class='{cls}'>{cells}</tr>")
    table.append("</tbody></table></div>")
    summary = json.dumps({"n_points": data["n_points"], "n_trials": len(report.records), "n_front": len(report.front)})
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tune_batch report: {html.escape(report.config.name)}</title>
<style>
body {{ font-family: sans-serif; max-width: 1024px; margin: 0 auto; padding: 0 1em; }}
.plot {{ width: 100%; overflow-x: auto; }} .scroll {{ overflow-x: auto; }} p.answer {{ font-size: 1.25em; }}
#tb-answer {{ background: #fffbe6; border: 1px solid #f0e0a0; padding: 0.5em 1em; }}
table {{ border-collapse: collapse; font-size: 12px; }} td, th {{ border: 1px solid #ddd; padding: 2px 6px; }}
tr.oom, tr.skipped, tr.failed {{ color: #888; }} tr.front {{ background: #fde0e0; }} \
tr.recommended {{ background: #fff3b0; font-weight: bold; }}
</style></head><body>
<h1>tune_batch: {html.escape(report.config.name)}</h1>
{answer_html(report)}
<script type="application/json" id="tb-summary">{summary}</script>
{''.join(parts)}
<h2>Trials</h2>
{''.join(table)}
<p id="tb-optuna-front">Optuna's own front (<code>study.best_trials</code>, what optuna-dashboard and
<code>plot_pareto_front</code> draw) is computed from the values each trial was told when it ended (its batch
size's mean samples/s at that time) with strict dominance; the front above uses the final means and the noise.
The study keeps this front as its user attribute <code>tune_batch_front</code>
({html.escape(str(sorted(r.trial_id for r in report.front if isinstance(r.trial_id, int))))}).</p>
</body></html>
"""


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
