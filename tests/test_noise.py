"""Noise: measured per search and used. Within-noise differences do not dominate, repeats with
other seeds give every front figure a half-width, disturbed windows are flagged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tune_batch.analysis.noise import beyond, mean_ci, rate_ci, t95
from tune_batch.analysis.notes import texts
from tune_batch.analysis.pareto import noisy_non_dominated
from tune_batch.analysis.report import build_report
from tune_batch.output.files import write_files
from tune_batch.output.text import render_summary
from tune_batch.store.records import TrialResult


def _rec(tid, sps, acc, b=16, lr=0.01, repeat_of=None, seed=0, sps_ci=None) -> TrialResult:
    return TrialResult.from_record({
        "trial_id": tid, "params": {"batch_size": b, "lr": lr, "num_gpus": 1}, "status": "ok",
        "metrics": {"samples_per_s": sps, "val_acc": acc, "peak_mem_bytes": 2**20 * b,
                    **({"samples_per_s_ci": sps_ci} if sps_ci else {})},
        "info": {"seed": seed, **({"repeat_of": repeat_of} if repeat_of is not None else {})}})


def _cfg():
    return tiny_config(objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}])


def test_statistics() -> None:
    assert t95(2) == pytest.approx(4.303) and t95(100) == 1.96
    m, ci = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and ci == pytest.approx(4.303 * 1.0 / 3**0.5)
    assert mean_ci([5.0]) == (5.0, None)
    assert rate_ci([(10, 1.0), (10, 1.0), (10, 1.0)], 100.0) == 0.0
    assert rate_ci([(10, 1.0)], 100.0) is None
    assert beyond(1.0, 0.5, 0.1, 0.1) and not beyond(1.0, 0.9, 0.1, 0.1)


def test_accuracy_noise_is_pooled_as_a_share_and_read_at_each_level(tmp_path: Path) -> None:
    """A config near 0.98 cannot move by the +- a config near 0.5 does: val_acc's seed spread is
    pooled on the log-odds scale and each config's half-width read back at its own level."""
    import math

    from tune_batch.analysis.points import NoiseLevel

    recs = [_rec(0, 1000, 0.98), _rec("0s1", 1000, 0.97, repeat_of=0, seed=1),
            _rec("0s2", 1000, 0.99, repeat_of=0, seed=2),
            _rec(1, 2000, 0.50, b=64), _rec("1s1", 2000, 0.40, b=64, repeat_of=1, seed=1),
            _rec("1s2", 2000, 0.62, b=64, repeat_of=1, seed=2)]
    report = build_report(_cfg(), recs)
    level = report.noise["val_acc"]
    assert level.share and "log-odds" in level.how
    hi, lo = report.points[0].ci["val_acc"], report.points[1].ci["val_acc"]
    assert 0 < hi < lo / 3  # the same pooled spread is narrow at 0.98 and wide at 0.5
    # pooled by hand on log(p / (1 - p)): t95(4) x sqrt(pooled variance)
    a = [[math.log(v / (1 - v)) for v in vs] for vs in ([0.98, 0.97, 0.99], [0.50, 0.40, 0.62])]
    ss = sum(sum((x - sum(g) / 3) ** 2 for x in g) for g in a)
    assert level.half_width == pytest.approx(t95(4) * math.sqrt(ss / 4))
    assert 0 < level.of(1.0, 1) <= 0.5 and 0 < level.of(0.0, 1) <= 0.5  # read back inside [0, 1], finite
    assert NoiseLevel(0.1, False, "", share=True).of(0.5, 4) == pytest.approx(1 / (1 + math.exp(-0.05)) - 0.5)
    write_files(report, tmp_path)
    noise = json.loads((tmp_path / "pareto.json").read_text())["noise"]["val_acc"]
    assert noise["log_odds_half_width"] == pytest.approx(level.half_width)
    assert noise["half_width_at"]["0.99"] < noise["half_width_at"]["0.5"]
    assert "at 0.95" in render_summary(report)


def test_a_difference_inside_the_noise_does_not_dominate() -> None:
    d = ["maximize", "maximize"]
    # b is worse than a in both, but by less than the noise: both stay
    assert noisy_non_dominated([[100, 0.90], [98, 0.89]], [[5, 0.02], [5, 0.02]], d) == [0, 1]
    # beyond the noise in one objective, inside it in the other: dominated
    assert noisy_non_dominated([[100, 0.90], [80, 0.91]], [[5, 0.02], [5, 0.02]], d) == [0]
    # without noise this is the plain Pareto front
    assert noisy_non_dominated([[100, 0.90], [98, 0.89]], [[None, None], [None, None]], d) == [0]


def test_only_a_front_point_puts_another_off_the_front() -> None:
    # samples/s and val_acc: each config faster than the one before beyond the noise and 0.1 less
    # accurate, inside the noise (0.17 combined) of its neighbour and beyond it two steps away.
    # When any dominating point put one off, the chain left only the fastest (0.46), which 0.66
    # and 0.76 beat beyond the noise in val_acc.
    d = ["maximize", "maximize"]
    vals = [[1000, 0.76], [2000, 0.66], [3000, 0.56], [4000, 0.46]]
    cis = [[50, 0.12]] * 4
    # 3 dominates 2, which is off; 2 does not count against 1, which stays and puts 0 off
    assert noisy_non_dominated(vals, cis, d) == [1, 3]
    # the order of the list does not matter: the order of the domination does
    assert noisy_non_dominated(vals[::-1], cis, d) == [0, 2]
    assert noisy_non_dominated(vals[:3], cis[:3], d) == [0, 2]
    # three objectives can make a cycle (each beats the next beyond the noise in one objective and
    # is inside it in the others): its points all stay, in whatever order they come
    cycle = [[1.0, 0.5, 0.0], [0.0, 1.0, 0.5], [0.5, 0.0, 1.0]]
    tight = [[0.6, 0.6, 0.6]] * 3
    assert noisy_non_dominated(cycle, tight, ["maximize"] * 3) == [0, 1, 2]
    assert noisy_non_dominated(cycle[::-1], tight, ["maximize"] * 3) == [0, 1, 2]
    # and a point the cycle's members beat beyond the noise, with nothing better, goes
    assert noisy_non_dominated([*cycle, [-1.0, -1.0, -1.0]], tight + [[0.6] * 3], ["maximize"] * 3) == [0, 1, 2]


def test_the_front_of_many_configs_compares_them_in_blocks_as_pair_by_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pair at once, in blocks of rows (a 1000-trial search's progress lines cost seconds
    each pair by pair): the dominators are those ``better_beyond`` reads pair by pair, blocks of one
    row or of all of them alike; non-finite points and unknown half-widths as before."""
    import random

    from tune_batch.analysis import pareto

    rng = random.Random(0)
    for _ in range(40):
        n, k = rng.randint(1, 30), rng.choice([1, 2, 3])
        d = [rng.choice(["maximize", "minimize"]) for _ in range(k)]
        vals = [[float("nan") if rng.random() < 0.05 else round(rng.gauss(0, 1), 1) for _ in range(k)]
                for _ in range(n)]
        cis = [[rng.choice([None, 0.0, abs(rng.gauss(0, 0.8))]) for _ in range(k)] for _ in range(n)]
        finite = [i for i, v in enumerate(vals) if all(x == x for x in v)]
        pairwise = {i: [j for j in finite if j != i and pareto.better_beyond(vals[j], vals[i], cis[j], cis[i], d)
                        and not pareto.better_beyond(vals[i], vals[j], cis[i], cis[j], d)] for i in finite}
        for cells in (1, 7, pareto.PAIR_CELLS):
            monkeypatch.setattr(pareto, "PAIR_CELLS", cells)
            assert pareto._dominators(finite, vals, cis, d) == pairwise


def test_an_unmeasured_noise_says_why() -> None:
    """A search stopped before its repeats said "(repeats.seeds = 0)" of a config whose repeats.seeds
    was 2: the repeats had not run."""
    short = [_rec(0, 1000, 0.95), _rec(1, 1500, 0.60, b=64)]

    def how(**repeats: int) -> str:
        cfg = tiny_config(objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}], repeats=repeats)
        return build_report(cfg, short).noise["val_acc"].how

    assert how(seeds=0) == "unknown: no config was measured twice (repeats.seeds = 0)"
    assert how(seeds=2, candidates=0).endswith("(repeats.candidates = 0)")
    assert how(seeds=2, candidates=2).endswith("(the repeats of front candidates have not run)")


def test_repeats_give_means_half_widths_and_the_noise(tmp_path: Path) -> None:
    cfg = _cfg()
    recs = [_rec(0, 1000, 0.95), _rec(1, 1500, 0.60, b=64), _rec(2, 1020, 0.50),
            _rec("0s1", 1100, 0.93, repeat_of=0, seed=1), _rec("0s2", 900, 0.97, repeat_of=0, seed=2),
            _rec("1s1", 1400, 0.70, b=64, repeat_of=1, seed=1), _rec("1s2", 1600, 0.50, b=64, repeat_of=1, seed=2)]
    report = build_report(cfg, recs)
    assert len(report.records) == 3 and len(report.repeats) == 4  # repeats are not searched trials
    p0 = report.points[0]
    assert p0.n == 3 and p0.mean["val_acc"] == pytest.approx(0.95)
    assert report.noise["val_acc"].half_width > 0 and "pooled over 2 config(s)" in report.noise["val_acc"].how
    assert report.noise["samples_per_s"].relative
    assert {r.trial_id for r in report.front} == {0, 1}  # trial 2 is beyond noise behind trial 0 in val_acc
    write_files(report, tmp_path)
    pareto = json.loads((tmp_path / "pareto.json").read_text())
    assert set(pareto["noise"]) == {"samples_per_s", "val_acc"}
    for t in pareto["trials"]:
        for m in ("samples_per_s", "val_acc"):
            assert t["metrics"][m] is not None and t["metrics"][f"{m}_ci"] > 0
    front0 = next(t for t in pareto["trials"] if t["trial_id"] == 0)
    assert front0["runs"] == [0, "0s1", "0s2"]
    text = render_summary(report)
    assert "+-" in text and "noise val_acc" in text and "repeats: 4 run(s)" in text


def test_throughput_pools_over_every_learning_rate_of_a_batch_size(tmp_path: Path) -> None:
    # a step at lr 0.05 does the work of one at lr 0.01: B's higher reading is noise, and it must
    # not put B (less accurate, same step) on the front beside A
    recs = [_rec(0, 1000, 0.95, b=32, lr=0.01), _rec(1, 1100, 0.80, b=32, lr=0.05), _rec(3, 1050, 0.70, b=32, lr=0.002),
            _rec(2, 3000, 0.50, b=128)]
    report = build_report(_cfg(), recs)
    a, b, c = (report.points[i] for i in range(3))
    assert a.mean["samples_per_s"] == b.mean["samples_per_s"] == pytest.approx(1050)
    assert a.step_runs == b.step_runs == 3 and c.step_runs == 1 and c.mean["samples_per_s"] == 3000
    assert a.mean["val_acc"] == 0.95 and b.mean["val_acc"] == 0.80  # accuracy stays the config's own
    assert "1 step(s) measured more than once" in report.noise["samples_per_s"].how
    assert {r.trial_id for r in report.front} == {0, 2}
    from tune_batch.analysis.report import tradeoffs

    assert tradeoffs(report, recs[1], recs[0])[0] == "the same samples/s (the same step, another learning rate)"
    write_files(report, tmp_path)
    pareto = json.loads((tmp_path / "pareto.json").read_text())
    entry = next(t for t in pareto["trials"] if t["trial_id"] == 0)
    assert entry["runs"] == [0] and entry["step_runs"] == 3
    assert entry["metrics"]["samples_per_s"] == pytest.approx(1050) and entry["metrics"]["samples_per_s_ci"] > 0
    # another precision (or device, micro-batch, GPU count) is another step: not pooled
    other = TrialResult.from_record({**recs[1].to_record(), "info": {"precision": "bf16"}})
    report = build_report(_cfg(), [recs[0], other, recs[3]])
    assert report.points[0].mean["samples_per_s"] == 1000 and report.points[1].step_runs == 1


def test_a_disturbed_reading_does_not_set_its_steps_throughput() -> None:
    from tune_batch.analysis.points import StepMeans

    def disturbed(r: TrialResult) -> TrialResult:
        return r.replace(info=r.info.with_(disturbed=True, others_cpu_frac=0.53))

    # batch 16's second config was timed while another process took half the CPU (337 samples/s):
    # that measured the contention, not the step, and must not push the config off the front
    recs = [_rec(0, 2800, 0.90, b=16, lr=0.01), disturbed(_rec(1, 337, 0.97, b=16, lr=0.1)),
            _rec(2, 6000, 0.60, b=64), _rec(3, 6100, 0.62, b=64, lr=0.05)]
    report = build_report(_cfg(), recs)
    assert report.points[1].mean["samples_per_s"] == 2800 and report.points[1].step_runs == 1
    assert {r.trial_id for r in report.front} == {1, 3}  # 1 is the most accurate, at its step's speed
    steps = StepMeans()
    for r in recs:
        steps.observe(r)
    assert steps.told(recs[1]).metrics.samples_per_s == 2800 and not steps.only_disturbed(recs[1])
    # a step with no undisturbed reading keeps its disturbed ones, and says so
    alone = disturbed(_rec(4, 400, 0.9, b=32))
    steps.observe(alone)
    assert steps.told(alone).metrics.samples_per_s == 400 and steps.only_disturbed(alone)
    report = build_report(_cfg(), [*recs, alone])
    assert report.points[4].mean["samples_per_s"] == 400


def test_no_recommendation_far_below_the_best_accuracy_unless_faster_beyond_noise() -> None:
    cfg = _cfg()
    # the knee (trial 1) is 0.08 below the best accuracy and only 1.05x faster, inside the noise
    recs = [_rec(0, 1000, 0.95, sps_ci=80), _rec(1, 1050, 0.87, b=32, sps_ci=80), _rec(2, 400, 0.96, b=256, sps_ci=30)]
    report = build_report(cfg, recs)
    assert report.recommended.trial_id in (0, 2)
    assert any("recommended instead of the knee" in n for n in texts(report.notes)) or report.recommended.trial_id == 0
    best = max(r.metrics.val_acc for r in recs)
    assert report.recommended.metrics.val_acc >= best - 0.05


@pytest.mark.slow
def test_optuna_backend_repeats_front_candidates_and_resumes(tmp_path: Path) -> None:
    from tune_batch.pipeline.search import search

    cfg = tiny_config(search={"backend": "optuna", "seed": 0}, budget={"trials": 3, "train_samples": 256},
                      objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}],
                      repeats={"candidates": 2, "seeds": 1})
    out = tmp_path / "run"
    res = search(cfg, out, quiet=True)
    recs = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    repeats = [r for r in recs if r["info"].get("repeat_of") is not None]
    assert len(recs) - len(repeats) == 3 and 1 <= len(repeats) <= 2
    assert all(r["info"]["seed"] == 1 and r["trial_id"] == f"{r['info']['repeat_of']}s1" for r in repeats)
    assert len(res.records) == 3 and res.report.noise["val_acc"].half_width is not None
    again = search(cfg, out, quiet=True)  # nothing left to run: no trial and no repeat again
    assert len((out / "trials.jsonl").read_text().splitlines()) == len(recs)
    # the same recommendation after the resume; None in both when 3 trials of 256 samples learned
    # nothing (a CI run hit that: the old line then raised AttributeError on None)
    assert getattr(again.recommended, "trial_id", None) == getattr(res.recommended, "trial_id", None)


@pytest.mark.serial
@pytest.mark.slow
def test_a_trial_beside_a_busy_process_is_flagged_disturbed() -> None:
    from tune_batch.trial import run_trial

    # two busy processes that are not this process's children (the trial's own tree, DataLoader
    # workers included, is not "other"): started by a shell that exits at once
    busy = []
    for _ in range(2):
        sh = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                            capture_output=True, text=True, check=True)
        busy.append(int(sh.stdout.strip()))
    try:
        res = run_trial(tiny_config(budget={"train_samples": 512, "min_window_s": 1.0}),
                        {"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    finally:
        for pid in busy:
            os.kill(pid, signal.SIGKILL)
    assert res.status == "ok", res.reason
    assert res.info.disturbed and res.info.others_cpu_frac > 0.15
    assert res.metrics.samples_per_s_ci is not None and res.metrics.samples_per_s_ci > 0


def test_a_worker_groups_other_ranks_are_not_other_tenants(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-worker group's rank read the other rank's CPU time as another tenant's: on this 2-core
    machine 12 of 16 two-worker runs of a quickstart search over num_gpus [1, 2] were flagged
    disturbed (others 0.42-0.53), so their throughput was set aside and their time to target had
    no prediction. A rank is told its node's other ranks (PEERS_ENV); their CPU time is the
    trial's. Two windows over the same second, one told of a busy process and one not."""
    import time

    from tune_batch.measure.cpu import PEERS_ENV, CpuUtilWindow

    sh = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                        capture_output=True, text=True, check=True)  # not this process's child
    peer = int(sh.stdout.strip())
    try:
        monkeypatch.setenv(PEERS_ENV, f"{peer},999999999")  # a rank that is gone is skipped
        told = CpuUtilWindow(threads=1)
        monkeypatch.delenv(PEERS_ENV)
        blind = CpuUtilWindow(threads=1)
        blind.start()
        told.start()
        time.sleep(1.0)
        a, b = told.stop(), blind.stop()
    finally:
        os.kill(peer, signal.SIGKILL)
    assert a.peers_cpu_s > 0.3 * a.wall_s and b.peers_cpu_s == 0.0  # the busy peer ran for most of it
    assert a.others_cpu_frac is not None and b.others_cpu_frac is not None
    assert b.others_cpu_frac - a.others_cpu_frac > 0.3 * a.peers_cpu_s / a.machine_total_s
