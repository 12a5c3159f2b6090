"""Reports: hypervolume against Optuna's, recommendation, best.yaml, report.html in a real browser."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optuna._hypervolume import compute_hypervolume

from tests.conftest import tiny_config
from tune_batch.analysis.pareto import REFERENCE, choose, hypervolume, parse_prefer
from tune_batch.analysis.report import build_report
from tune_batch.cli import main
from tune_batch.config import load_config
from tune_batch.errors import UserError
from tune_batch.output.files import write_files
from tune_batch.output.html import figure_data
from tune_batch.store.records import Params, TrialResult


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 3).flatmap(
    lambda k: st.lists(st.lists(st.floats(0, 1), min_size=k, max_size=k), min_size=1, max_size=12)))
def test_hypervolume_equals_optunas(points: list[list[float]]) -> None:  # 2 and 3 objectives
    # ours maximises above (ref, ..); Optuna's minimises below its reference point: negate both
    ours = hypervolume(points)
    theirs = compute_hypervolume(-np.array(points), np.full(len(points[0]), -REFERENCE))
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(4, 5).flatmap(
    lambda k: st.lists(st.lists(st.floats(0, 1), min_size=k, max_size=k), min_size=1, max_size=7)))
def test_hypervolume_of_more_objectives_equals_optunas(points: list[list[float]]) -> None:
    # the config accepts up to seven objectives: the hypervolume is exact for any number
    ours = hypervolume(points)
    theirs = compute_hypervolume(-np.array(points), np.full(len(points[0]), -REFERENCE))
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def _rec(i: int, sps: float, acc: float, status: str = "ok", b: int = 16) -> TrialResult:
    return TrialResult.from_record({
            "trial_id": i, "params": {"batch_size": b, "lr": 0.01 * (i + 1), "num_gpus": 1}, "status": status,
            "reason": None if status == "ok" else "out of memory",
            "metrics": {"samples_per_s": sps, "device_util": 0.9, "val_acc": acc, "peak_mem_bytes": 2**20 * b}
            if status == "ok" else {}, "duration_s": 1.0, "info": {}})


RECS = [_rec(0, 100, 0.95), _rec(1, 200, 0.90, b=64), _rec(2, 400, 0.50, b=256), _rec(3, 90, 0.80, b=32),
        _rec(4, 0, 0, "oom", 512)]


def test_recommendation_knee_prefer_and_weights() -> None:
    cfg = tiny_config()
    report = build_report(cfg, RECS)
    assert {r.trial_id for r in report.front} == {0, 1, 2}
    assert report.recommended.trial_id == 1  # the balanced point
    m, d = cfg.metric_names, cfg.directions
    values = [[r.metrics.value(x) for x in m] for r in report.front]

    def preferred(prefer: str | dict[str, float]) -> object:  # the choice on the trials' own measurements
        return report.front[choose(values, m, d, prefer)[0]].trial_id

    assert preferred("samples_per_s") == 2
    assert preferred("val_acc") == 0
    assert preferred({"val_acc": 4, "samples_per_s": 1}) == 0
    t = report.tradeoffs[2]
    assert t[0] == "2.00x samples/s (faster per epoch)" and t[1] == "-0.400 val_acc"
    with pytest.raises(UserError, match="not an objective"):
        parse_prefer("speed", m)
    with pytest.raises(UserError, match="weights must be >= 0"):
        parse_prefer("val_acc=-1", m)


def test_best_yaml_is_a_valid_config_of_the_recommended_point(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    report = build_report(tiny_config(), RECS)
    write_files(report, tmp_path)
    best = load_config(tmp_path / "best.yaml")
    assert best.space.batch_choices() == [64] and best.space.lr.low == best.space.lr.high == 0.02
    assert best.space.num_gpus == [1] and best.budget.trials == 1
    assert main(["validate", str(tmp_path / "best.yaml")]) == 0


def test_report_rebuilds_the_same_pareto_from_trials_and_config_alone(tmp_path: Path) -> None:
    from tune_batch.store.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.prepare(tiny_config())
    for r in RECS:
        run.append(r)
    write_files(build_report(tiny_config(), RECS), run.path)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("trials.jsonl", "config.yaml"):
        shutil.copy(run.path / name, copy / name)
    assert main(["report", str(copy)]) == 0
    assert json.loads((copy / "pareto.json").read_text()) == json.loads((run.path / "pareto.json").read_text())
    for name in ("results.csv", "best.yaml", "report.html"):
        assert (copy / name).exists()


def test_figure_data_counts_the_points() -> None:
    report = build_report(tiny_config(), RECS)
    data = figure_data(report)
    assert len(data["pairs"]) == 3 and len(data["ok"]) == 4
    assert data["n_points"] == 5 + 3 * 4 + 3


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
@pytest.mark.slow
def test_report_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    report = build_report(tiny_config(), RECS)
    write_files(report, tmp_path)
    page = (tmp_path / "report.html").resolve()
    html = page.read_text()
    assert "<script src=" not in html  # self-contained: plotly.js is inline, nothing is fetched
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    p = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout

    def panel(div: str) -> str:  # the rendered DOM of one panel, up to the next heading
        start = dom.index(f'id="{div}"')
        end = dom.find("<h2>", start)
        return dom[start:end if end > 0 else len(dom)]

    # the answer comes first, in words, before any plot
    assert (dom.index('id="tb-answer"') < dom.index('id="tb-seed"') < dom.index('id="tb-heat"')
            < dom.index('id="tb-front"'))
    answer = panel("tb-answer")
    rec = report.recommended
    assert f"batch_size {rec.params.batch_size}" in answer and "+-" in answer
    assert dom.count("<h1>") == 1 and "title_text" not in dom
    seed, heat = panel("tb-seed"), panel("tb-heat")
    assert "main-svg" in seed and "samples/s" in seed and "peak memory (MiB)" in seed
    assert "batch size (samples/step)" in seed and "num_gpus 1" in seed
    assert "main-svg" in heat and "learning rate (log)" in heat and "val_acc" in heat
    for div in ("tb-seed", "tb-heat", "tb-front"):  # the recommendation is marked in every view
        assert "recommended" in panel(div), div
    assert len(re.findall(r'<path class="point"', panel("tb-front"))) == figure_data(report)["n_points"]
    assert "main-svg" in dom and "parcoords" in dom
    # a phone's width renders too (the DOM above is the default window's; each launch costs ~4 s)
    shot = tmp_path / "shot-390.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=390,844", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000


def test_summary_says_which_skips_used_no_trial() -> None:
    from tune_batch.output.text import render_summary
    from tune_batch.store.records import Metrics, Params, Status, TrialInfo

    cfg = tiny_config()
    p = Params.of({"batch_size": 16, "lr": 0.01, "num_gpus": 1})
    ok = TrialResult(0, p, Status.OK, metrics=Metrics(samples_per_s=10.0, device_util=0.5, val_acc=0.5))
    free = TrialResult(1, p, Status.SKIPPED, "memory: ...", info=TrialInfo(free_skip=True))
    counted = TrialResult(2, p, Status.SKIPPED, "memory: ...")
    failed = TrialResult(3, p, Status.FAILED, "boom")
    first = render_summary(build_report(cfg, [ok, free, counted, failed])).splitlines()[0]
    # the note belongs to the skipped count, whatever status comes after it
    assert first.startswith("4 trials, ok 1, skipped 2 (1 of them used no trial of budget.trials), failed 1;"), first
    assert "used no trial" not in render_summary(build_report(cfg, [ok, counted])).splitlines()[0]


def test_a_peak_under_one_mib_reads_in_kib_not_as_zero() -> None:
    """A small model's peak (Keras digits: 0.4 MiB) was shown "0MiB", as if nothing was measured."""
    from tune_batch.config.sizes import shown
    from tune_batch.output.text import render_table

    assert [shown(n) for n in (0, 424600, 7536640, 38.3 * 2**20, 12 * 2**30)] == [
        "0 B", "415 KiB", "7.2 MiB", "38 MiB", "12 GiB"]
    assert shown(-424600, signed=True) == "-415 KiB" and shown(2**20, signed=True) == "+1.0 MiB"
    small = [dataclasses.replace(r, metrics=dataclasses.replace(r.metrics, peak_mem_bytes=424600.0 * (i + 1)))
             for i, r in enumerate([_rec(0, 100, 0.9), _rec(1, 200, 0.8, b=32)])]
    table = render_table(build_report(tiny_config(), small))
    assert "415 KiB" in table and "829 KiB" in table and "0MiB" not in table, table


def test_a_loss_objective_keeps_its_digits_and_shows_in_the_tradeoffs() -> None:
    """An eval_loss of 1.249 +- 0.044 was shown "1.2+-0.0", and the "instead" lines left the loss
    out (they knew val_acc only): a loss user could not see what the other front points cost."""
    from tune_batch.output.text import render_table, tradeoff_lines

    cfg = load_config(Path(__file__).parent.parent / "configs" / "tiny_lm.yaml")
    recs = [TrialResult.from_record({
        "trial_id": i, "params": {"batch_size": b, "lr": 0.001 * (i + 1), "num_gpus": 1}, "status": "ok",
        "metrics": {"samples_per_s": sps, "val_loss": loss, "peak_mem_bytes": 2**20 * b},
        "duration_s": 1.0, "info": {}}) for i, (b, sps, loss) in enumerate([(16, 100.0, 1.249), (64, 300.0, 1.5)])]
    report = build_report(cfg, recs)
    table = render_table(report)
    assert "1.249" in table and "1.5" in table, table
    lines = tradeoff_lines(report)
    assert lines and any("val_loss" in line for line in lines), lines


def test_the_confirmation_curves_of_a_loss_start_at_the_untrained_value() -> None:
    """report.html drew every confirmation curve from (0 s, chance accuracy or 0) and titled it
    val_acc: a val_loss curve began at 0 and seemed to rise with training; its batch x lr map was
    left out, knowing val_acc only."""
    from tune_batch.decide.recommend import decide
    from tune_batch.output.html import _curves

    cfg = load_config(Path(__file__).parent.parent / "configs" / "tiny_lm.yaml")

    def rec(tid, b, loss, **info):
        return TrialResult.from_record({
            "trial_id": tid, "params": {"batch_size": b, "lr": 0.01, "num_gpus": 1}, "status": "ok",
            "metrics": {"samples_per_s": 100.0 * b, "val_loss": loss, "peak_mem_bytes": 2**20 * b},
            "duration_s": 1.0, "info": {"seed": 0, **info}})

    curve = [[100 * (i + 1), 1.0 * (i + 1), v, 1.0] for i, v in enumerate([2.5, 1.9, 1.5, 1.4])]
    recs = [rec(0, 16, 1.6), rec(1, 64, 1.9), rec("0c0", 16, 1.4, confirm_of=0, curve=curve, start_value=4.16),
            rec("1c0", 64, 1.5, confirm_of=1, curve=[[*c[:2], c[2] + 0.1, 1.0] for c in curve], start_value=4.2)]
    report = decide(cfg, recs)
    assert report.confirmation is not None and report.confirmation.metric == "val_loss"
    fig = _curves(report)
    assert fig.layout.yaxis.title.text == "val_loss"
    assert sorted(trace.y[0] for trace in fig.data) == [4.16, 4.2]  # the untrained model, not 0
    assert [trace.x[0] for trace in fig.data] == [0.0, 0.0]
    # the baseline's runs beside them (the summary compares it, the chart left it out)
    base = rec("baseline-c0", 32, 1.7, confirm_of="baseline", curve=[[*c[:2], c[2] + 0.3, 1.0] for c in curve],
               start_value=4.1)
    base = base.replace(params=Params(32, 3e-4, 1))  # the config's baseline
    with_base = _curves(decide(cfg, [*recs, base]))
    (line,) = [t for t in with_base.data if t.name.startswith("baseline")]
    assert line.name == "baseline: batch_size 32, lr 0.0003"
    assert list(line.y) == pytest.approx([4.1, 2.8, 2.2, 1.8, 1.7])
    assert line.line.dash == "dash" and len(with_base.data) == 3
    from tune_batch.output.views import heat_figure

    heat = heat_figure(report)  # was None: it knew val_acc only
    assert heat is not None and heat.data[0].marker.colorbar.title.text == "val_loss"
    assert list(heat.data[0].marker.color) == [1.6, 1.9]  # the short trials' losses
    from tune_batch.output.html import render_html

    page = render_html(report)
    assert "<h2>val_loss over batch size and learning rate</h2>" in page
    head = re.search(r"<table id='tb-trials'><thead><tr>(.*?)</tr>", page).group(1)
    names = re.findall(r"<th>(.*?)</th>", head)
    # the objectives lead (each run's value, its config's mean and +-); no column empty in every row
    assert names[:6] == ["trial_id", "status", "batch_size", "lr", "num_gpus", "samples_per_s"], names
    assert names.index("val_loss") < names.index("val_loss_mean") < names.index("peak_mem_bytes"), names
    assert "val_acc" not in names and "mfu" not in names


def test_a_throughput_ratio_inside_its_noise_takes_no_side() -> None:
    """"1.00x +- 0.09 samples/s (slower per epoch)" claimed a side the noise does not give."""
    def rep(tid, seed, sps, acc, b):
        r = _rec(0, sps, acc, b=b).to_record()
        return TrialResult.from_record({**r, "trial_id": tid, "params": {**r["params"], "lr": 0.01 * (1 + b // 32)},
                                        "info": {"seed": seed, **({"repeat_of": int(tid[0])} if seed else {})}})

    recs = [rep(0, 0, 100.0, 0.95, 16), rep("0s1", 1, 120.0, 0.80, 16),
            rep(1, 0, 104.0, 0.92, 32), rep("1s1", 1, 118.0, 0.83, 32)]
    report = build_report(tiny_config(), recs)
    lines = [line for t in report.tradeoffs.values() for line in t if "samples/s" in line]
    assert lines and all("the same per epoch within noise" in line for line in lines), report.tradeoffs


def test_a_throughput_ratios_interval_is_a_ratios() -> None:
    """Read as +- its half-width, a noisy ratio's interval reached below zero ("0.83x +- 0.94
    samples/s", a 2-worker search on a 2-core machine); a ratio's is ratio x exp(+-w)."""
    import re

    def rep(tid, seed, sps, b):
        r = _rec(0, sps, 0.9, b=b).to_record()
        return TrialResult.from_record({**r, "trial_id": tid, "params": {**r["params"], "lr": 0.01 * (1 + b // 32)},
                                        "info": {"seed": seed, **({"repeat_of": int(tid[0])} if seed else {})}})

    recs = [rep(0, 0, 100.0, 16), rep("0s1", 1, 300.0, 16), rep(1, 0, 240.0, 32), rep("1s1", 1, 250.0, 32)]
    report = build_report(tiny_config(), recs)
    (line,) = [x for t in report.tradeoffs.values() for x in t if "samples/s" in x]
    ratio, lo, hi = map(float, re.match(r"([\d.]+)x \(([\d.]+)-([\d.]+)\) samples/s", line).groups())
    assert 0 < lo < ratio < hi and lo * hi == pytest.approx(ratio**2, rel=0.05), line
    assert "+-" not in line and "within noise" in line


def test_a_share_noise_wider_than_its_scale_is_said_to_be_unknown() -> None:
    """One config run twice (0.95 and 0.80) is one degree of freedom: "+-0.500 at 0.99" read as a
    figure, where it says the noise is not measured yet."""
    from tune_batch.output.text import noise_lines

    def rep(tid, seed, acc):
        r = _rec(0, 100.0, acc).to_record()
        return TrialResult.from_record({**r, "trial_id": tid,
                                        "info": {"seed": seed, **({"repeat_of": 0} if seed else {})}})

    one = [line for line in noise_lines(build_report(tiny_config(), [rep(0, 0, 0.95), rep("0s1", 1, 0.80)]))
           if line.startswith("noise val_acc")]
    assert one and "0.500 at 0.99" in one[0] and "too few runs with other seeds" in one[0], one
    many = [rep(0, 0, 0.95), rep("0s1", 1, 0.94), rep("0s2", 2, 0.95), rep("0s3", 3, 0.96)]
    assert not any("too few" in line for line in noise_lines(build_report(tiny_config(), many)))
