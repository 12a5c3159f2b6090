"""The first panels of report.html: the answer in words, the seed's picture (samples/s and peak
memory against batch size, one line per num_gpus, the memory cap drawn) and accuracy over
batch size x learning rate. Batch-size axes in powers of two, units on every axis, the
recommended config marked in every view."""

from __future__ import annotations

import html
import statistics
from typing import Any

from tune_batch.analysis.notes import texts
from tune_batch.analysis.objectives import is_feasible
from tune_batch.analysis.report import Report
from tune_batch.output.text import confirm_lines, noise_lines, tradeoff_lines
from tune_batch.store.records import Status, TrialResult

#: axis titles with units for the metrics a report plots
UNITS = {"samples_per_s": "samples/s", "val_acc": "validation accuracy (0-1)",
         "device_util": "device utilization (0-1)", "mfu": "MFU (0-1)", "peak_mem_bytes": "peak memory (bytes)",
         "energy_j_per_sample": "energy (J/sample)",
         "goodput": "goodput (samples/s x statistical efficiency)", "data_wait_frac": "time waiting for data (0-1)"}


def axis_label(metric: str) -> str:
    return f"{metric}: {UNITS[metric]}" if metric in UNITS else metric


STAR = {"symbol": "star", "size": 18, "color": "gold", "line": {"color": "black", "width": 1}}


def answer_html(report: Report) -> str:
    """The recommendation in words, what it gains and loses against the other front points
    (each +- its noise), the noise, the confirmation and the notes."""
    rec = report.recommended
    if rec is not None:
        p = rec.params
        which = "your baseline, kept" if report.baseline_kept else f"trial {rec.trial_id}"
        head = (f"<p class='answer'>Use <b>batch_size {p.batch_size}, lr {p.lr:.4g}, num_gpus {p.num_gpus}</b> "
                f"({html.escape(which)}; chosen by {html.escape(report.method)}).</p>")
    elif report.front:
        head = "<p class='answer'>No recommendation: see the notes below.</p>"
    else:
        head = "<p class='answer'>No feasible trial: nothing is on the Pareto front (the table gives each reason).</p>"
    trade = tradeoff_lines(report)
    parts = [head]
    if report.baseline is not None and report.confirmation is not None:  # the terminal's first line
        parts.append(f"<p class='baseline'>{html.escape(report.baseline.line(report.confirmation.metric))}</p>")
    if trade:
        parts.append("<p>Against the other configurations on the front (each difference +- its noise):</p><ul>"
                     + "".join(f"<li>{html.escape(t.strip())}</li>" for t in trade) + "</ul>")
    conf = confirm_lines(report.confirmation) if report.confirmation is not None else []
    rest = [*noise_lines(report), *conf, *texts(report.notes)]
    if rest:
        parts.append("<ul class='detail'>" + "".join(f"<li>{html.escape(x.strip())}</li>" for x in rest) + "</ul>")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items()))
    parts.append(f"<p class='meta'>{len(report.records)} trials ({counts}); Pareto front: {len(report.front)}; "
                 f"hypervolume {report.hypervolume:.3f}.</p>")
    return "<section id='tb-answer'>" + "".join(parts) + "</section>"


def _batch_axis(fig: Any, sizes: list[int], **where: Any) -> None:
    ticks = sorted(set(sizes))
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(b) for b in ticks],
                     title_text="batch size (samples/step)", **where)


def _memory_unit(values: list[float]) -> tuple[float, str]:
    return (2**30, "GiB") if max(values, default=0.0) >= 4 * 2**30 else (2**20, "MiB")


def _per_batch(report: Report, recs: list[TrialResult], metric: str) -> tuple[list[int], list[float], list[float]]:
    """Batch sizes, the median over their trials of each trial's mean, and the median half-width."""
    by: dict[int, list[tuple[float, float]]] = {}
    for r in recs:
        mean, ci = report.stat(r, metric)
        if mean is not None:
            by.setdefault(r.params.batch_size, []).append((mean, ci or 0.0))
    xs = sorted(by)
    return (xs, [statistics.median(m for m, _ in by[b]) for b in xs],
            [statistics.median(c for _, c in by[b]) for b in xs])


def seed_figure(report: Report) -> Any:
    """samples/s and peak memory against batch size, one line per num_gpus; None without data."""
    ok = [r for r in report.records if r.status is Status.OK]
    if not ok:
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=["throughput (median per batch size, +- noise)", "peak memory"])
    peaks = [r.metrics.peak_mem_bytes for r in ok if r.metrics.peak_mem_bytes is not None]
    caps = [r.info.memory_cap_bytes for r in report.records if r.info.memory_cap_bytes]
    scale, unit = _memory_unit([*peaks, *caps])
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    for i, n in enumerate(sorted({r.params.num_gpus for r in ok})):
        group, colour = [r for r in ok if r.params.num_gpus == n], palette[i % len(palette)]
        xs, ys, cis = _per_batch(report, group, "samples_per_s")
        fig.add_trace(go.Scatter(x=xs, y=ys, error_y={"type": "data", "array": cis, "visible": True},
                                 mode="lines+markers", name=f"num_gpus {n}", legendgroup=f"g{n}",
                                 line={"color": colour}), row=1, col=1)
        mem = {}
        for r in group:
            if r.metrics.peak_mem_bytes is not None:
                mem[r.params.batch_size] = max(mem.get(r.params.batch_size, 0.0), r.metrics.peak_mem_bytes)
        fig.add_trace(go.Scatter(x=sorted(mem), y=[mem[b] / scale for b in sorted(mem)], mode="lines+markers",
                                 name=f"num_gpus {n}", legendgroup=f"g{n}", showlegend=False,
                                 line={"color": colour}), row=1, col=2)
    over = [r for r in report.records if r.status in (Status.OOM, Status.SKIPPED) and caps]
    if over:
        fig.add_trace(go.Scatter(x=[r.params.batch_size for r in over], y=[max(caps) / scale] * len(over),
                                 mode="markers", name="out of memory / skipped", marker={"symbol": "x", "color": "grey",
                                                                                         "size": 10}), row=1, col=2)
    if caps:
        fig.add_hline(y=max(caps) / scale, line_dash="dash", annotation_text="memory cap", row=1, col=2)
    rec = report.recommended
    if rec is not None:
        sps, _ = report.stat(rec, "samples_per_s")
        fig.add_trace(go.Scatter(x=[rec.params.batch_size], y=[sps], mode="markers", marker=STAR,
                                 name="recommended"), row=1, col=1)
        if rec.metrics.peak_mem_bytes is not None:
            fig.add_trace(go.Scatter(x=[rec.params.batch_size], y=[rec.metrics.peak_mem_bytes / scale], mode="markers",
                                     marker=STAR, showlegend=False, name="recommended"), row=1, col=2)
    sizes = [r.params.batch_size for r in report.records]
    for col in (1, 2):
        _batch_axis(fig, sizes, row=1, col=col)
    fig.update_yaxes(title_text="samples/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=f"peak memory ({unit})", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=380, autosize=True, margin={"l": 60, "r": 20, "t": 40, "b": 60},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def heat_metric(report: Report) -> tuple[str, str]:
    """(name, direction) of what the batch x lr map colours by: val_acc where a trial measured it,
    else the metric the confirmation reads (a loss)."""
    if any(r.metrics.val_acc is not None for r in report.records) or report.config.confirm_metric is None:
        return "val_acc", "maximize"
    return report.config.confirm_metric


def heat_figure(report: Report) -> Any:
    """The quality metric of every trial (val_acc, or the loss the confirmation reads) over batch
    size x learning rate (colour: yellow is better either way), infeasible ones as grey crosses;
    None when no trial measured it."""
    metric, direction = heat_metric(report)
    ok = [r for r in report.records if is_feasible(r, [metric])]
    if not ok:
        return None
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[r.params.batch_size for r in ok], y=[r.params.lr for r in ok], mode="markers", name=metric,
        marker={"color": [r.metrics.value(metric) for r in ok], "size": 16,
                "colorscale": "Viridis" if direction == "maximize" else "Viridis_r",
                "colorbar": {"title": {"text": metric}}, "line": {"color": "white", "width": 1}},
        hovertext=[f"trial {r.trial_id}: batch_size {r.params.batch_size}, lr {r.params.lr:.3g}, "
                   f"{metric} {r.metrics.value(metric):.4g}" for r in ok], hoverinfo="text"))
    bad = [r for r in report.records if r.status is not Status.OK]
    if bad:
        fig.add_trace(go.Scatter(x=[r.params.batch_size for r in bad], y=[r.params.lr for r in bad], mode="markers",
                                 name="not ok (oom, skipped, diverged, failed)",
                                 marker={"symbol": "x", "color": "grey", "size": 10},
                                 hovertext=[f"trial {r.trial_id}: {r.status.value}" for r in bad], hoverinfo="text"))
    rec = report.recommended
    if rec is not None:
        fig.add_trace(go.Scatter(x=[rec.params.batch_size], y=[rec.params.lr], mode="markers", name="recommended",
                                 marker={**STAR, "size": 22, "color": "rgba(0,0,0,0)",
                                         "line": {"color": "black", "width": 2}}))
    _batch_axis(fig, [r.params.batch_size for r in report.records])
    fig.update_yaxes(type="log", title_text="learning rate (log)")
    fig.update_layout(height=380, autosize=True, margin={"l": 60, "r": 20, "t": 30, "b": 60},
                      legend={"orientation": "h", "y": -0.25})
    return fig
