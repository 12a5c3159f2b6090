"""scripts/bench_heldout.py's reading of its measurements: time to a target in either direction,
the yardstick a grid fixes (target, grid best, how late it is reached, the target-stopped grid),
and the won / lost verdict with its bootstrap interval."""

from __future__ import annotations

import math

import pytest

from tests.conftest import script


@pytest.fixture(scope="module")
def bench():
    with script("bench_heldout") as module:
        yield module


def _row(b: int, lr: float, seed: int, values: list[float], step_s: float) -> dict:
    curve = [[1024.0 * (i + 1), step_s * (i + 1), v, 0.0] for i, v in enumerate(values)]
    return {"params": {"batch_size": b, "lr": lr}, "seed": seed, "status": "ok", "curve": curve,
            "train_s": curve[-1][1]}


def test_time_to_target_reads_the_first_validation_that_reached_it_in_the_metrics_direction(bench) -> None:
    curve = [[1, 1.0, 0.5], [2, 2.0, 0.8], [3, 3.0, 0.9]]
    assert bench.ttt(curve, 0.8, "maximize") == 2.0
    assert bench.ttt(curve, 0.95, "maximize") == math.inf
    losses = [[1, 1.0, 3.0], [2, 2.0, 2.0], [3, 3.0, 1.5]]
    assert bench.ttt(losses, 2.0, "minimize") == 2.0
    assert bench.ttt(losses, 1.0, "minimize") == math.inf
    assert bench.ttt([[1, 1.0, float("nan")]], 0.0, "minimize") == math.inf  # a diverged run never reaches


def test_an_accuracy_yardstick_is_a_fraction_of_the_best_points_median_final_value(bench) -> None:
    # point A: fast (1 s per validation), final 0.80; point B: slow (2 s), final 0.90 (its seeds'
    # median; one lucky seed at 0.99 does not set the target)
    rows = [_row(16, 0.01, s, [0.5, 0.7, 0.8, 0.8], 1.0) for s in range(3)]
    rows += [_row(64, 0.01, s, [0.3, 0.6, 0.85, f], 2.0) for s, f in enumerate([0.9, 0.9, 0.99])]
    stick = bench.yardstick("tabular_mlp", rows)
    assert stick["direction"] == "maximize" and stick["target"] == pytest.approx(0.99 * 0.9)
    assert stick["grid_best"] == {"batch_size": 64, "lr": 0.01}  # the only point that reaches 0.891
    assert stick["grid_best_ttt_s"] == 8.0
    assert stick["grid_best_reach_frac"] == pytest.approx(4096 / bench.WORKLOADS["tabular_mlp"]["length"])
    assert stick["reaching"] == 1
    # the target-stopped grid: A never reaches it (all its 4 s), B stops at 8 s
    assert stick["target_grid_s"] == pytest.approx(4.0 + 8.0)
    assert stick["full_grid_s"] == pytest.approx(4.0 + 8.0)


def test_a_loss_yardstick_is_most_of_the_way_from_the_first_validation_to_the_best_final(bench) -> None:
    rows = [_row(16, 0.001, s, [4.0, 3.0, 2.0, 1.0], 1.0) for s in range(3)]
    rows += [_row(32, 0.001, s, [4.0, 3.5, 3.0, 2.5], 1.0) for s in range(3)]
    stick = bench.yardstick("lm_markov", rows)
    assert stick["direction"] == "minimize" and stick["first"] == 4.0
    assert stick["target"] == pytest.approx(4.0 - 0.99 * (4.0 - 1.0))
    assert stick["grid_best"]["batch_size"] == 16
    assert stick["grid_best_reach_frac"] == pytest.approx(4096 / bench.WORKLOADS["lm_markov"]["length"])


def test_a_win_needs_the_whole_interval_below_one(bench) -> None:
    fast, slow = [[1.0, 1.1, 0.9]] * 6, [[2.0, 2.2, 1.8]] * 6
    point, lo, hi = bench.ratio_interval(fast, slow)
    assert point == pytest.approx(0.5) and hi < 1.0
    point, lo, hi = bench.ratio_interval([[1.0, 3.0, 0.5]] * 6, [[1.5, 0.6, 2.0]] * 6)
    assert lo < 1.0 < hi  # the runs overlap: within noise
    # never reached against reached: a loss; both never: a tie, not a NaN
    assert bench.ratio_interval([[math.inf] * 3], [[1.0] * 3])[1] == math.inf
    assert bench.ratio_interval([[math.inf] * 3], [[math.inf] * 3]) == (1.0, 1.0, 1.0)


def test_side_by_side_runs_compare_only_configs_trained_in_one_round(bench) -> None:
    """Picks added later (an arm run afterwards) would be compared with runs trained in another
    invocation; instead every config trains again as a new round, and only that round is read."""
    a, b, c = (16, 0.01), (64, 0.01), (64, 0.03)
    old = [_row(*k, seed, [0.5, 0.9], 1.0) for k in (a, b) for seed in (7000, 7001)]
    # rows stored before rounds were recorded: one round where they cover every pick
    rows, tag, legacy = bench.side_round(old, [a, b], 2)
    assert legacy and rows == old and tag == ""
    # a new pick: nothing stored counts; a new round for all three
    rows, tag, legacy = bench.side_round(old, [a, b, c], 2)
    assert rows == [] and tag and not legacy
    newer = [{**_row(*k, 7000, [0.5, 0.9], 1.0), "set": tag} for k in (a, c)]
    rows, again, legacy = bench.side_round(old + newer, [a, b, c], 2)
    assert again == tag and rows == newer and not legacy  # the round resumes where it stopped
    # the earlier set of picks still reads its own rows only
    assert bench.side_round(old + newer, [a, b], 2)[0] == old


def test_the_horizon_and_rank_runs_arms_follow_each_default_search(bench, tmp_path, monkeypatch) -> None:
    """--horizon BETA: tune_batch with confirm.horizon_beta = BETA, interleaved with the default
    search seed by seed (the criterion in benchmarks/heldout/README.md compares the two). The
    arms' own work is stood in for: this checks the order and what each is told."""
    calls = []

    def fake_search(name, seed, sampler, out, goal=False, target=None, horizon=None, rank_runs=False):
        calls.append(("search", seed, sampler, horizon) + (("runs",) if rank_runs else ()))
        return {"pick": {"batch_size": 32, "lr": 0.001}, "wall_s": 1.0, "trial_s": 1.0, "trials": 1, "how": "x"}

    def fake(arm):
        def run(*args):
            calls.append((arm, *args[1:2]))
            return {"pick": {"batch_size": 64, "lr": 0.001}, "wall_s": 1.0, "how": arm}
        return run

    monkeypatch.setattr(bench, "search_arm", fake_search)
    for arm in ("asha_arm", "lightning_arm", "max_batch_arm", "baseline_arm"):
        monkeypatch.setattr(bench, arm, fake(arm))
    rows = bench.arms("attn_majority", [0, 1], tmp_path, horizon=0.4)
    assert [(r["arm"], r["seed"]) for r in rows][:3] == [("tune_batch", 0), ("tune_batch_horizon", 0),
                                                        ("random_equal", 0)]
    assert [c for c in calls if c[0] == "search"] == [("search", 0, None, None), ("search", 0, None, 0.4),
                                                      ("search", 0, "random", None), ("search", 1, None, None),
                                                      ("search", 1, None, 0.4), ("search", 1, "random", None)]
    assert "tune_batch_horizon" in bench.GOAL_ARMS  # read outside the headline, against the default
    # --rank-runs: confirm.rank_by = runs, likewise right after the default of each seed
    calls.clear()
    rows = bench.arms("mobilenet_adamw", [0], tmp_path / "r", rank_runs=True)
    assert [(r["arm"], r["seed"]) for r in rows][:3] == [("tune_batch", 0), ("tune_batch_rank_runs", 0),
                                                        ("random_equal", 0)]
    assert [c for c in calls if c[0] == "search"] == [("search", 0, None, None), ("search", 0, None, None, "runs"),
                                                      ("search", 0, "random", None)]
    assert "tune_batch_rank_runs" in bench.GOAL_ARMS
    # --rerank: no search; each default search re-decided right after it
    calls.clear()
    monkeypatch.setattr(bench, "rerank_arm", fake("rerank"))
    rows = bench.arms("fields_radam", [0, 1], tmp_path / "rr", rerank=True)
    assert [(r["arm"], r["seed"]) for r in rows][:4] == [("tune_batch", 0), ("tune_batch_rerank", 0),
                                                        ("random_equal", 0), ("asha", 0)]
    assert [c for c in calls if c[0] in ("search", "rerank")] == [
        ("search", 0, None, None), ("rerank", 0), ("search", 0, "random", None),
        ("search", 1, None, None), ("rerank", 1), ("search", 1, "random", None)]
    # --horizon with --rerank: each horizon search re-decided by its runs alone, right after it
    calls.clear()
    seen = []
    monkeypatch.setattr(bench, "rerank_arm", lambda name, seed, out, arm="tune_batch", folder="search": (
        seen.append((seed, arm, folder)) or {"pick": {"batch_size": 64, "lr": 0.001}, "wall_s": 1.0, "how": "r"}))
    rows = bench.arms("sets_adamax", [0], tmp_path / "hr", horizon=0.4, rerank=True)
    assert [(r["arm"], r["seed"]) for r in rows][:5] == [("tune_batch", 0), ("tune_batch_rerank", 0),
                                                        ("tune_batch_horizon", 0), ("tune_batch_horizon_runs", 0),
                                                        ("random_equal", 0)]
    assert seen == [(0, "tune_batch", "search"), (0, "tune_batch_horizon", "horizon")]
    assert "tune_batch_horizon_runs" in bench.GOAL_ARMS


def test_rerank_re_decides_a_stored_default_search_with_the_runs_alone(bench, tmp_path) -> None:
    """--rerank: no new search. The stored attn_majority search of seed 1, re-decided as it ran,
    gives its own pick (16 / 0.0025, the blend's); with confirm.rank_by: runs, 128 / 0.0091, whose
    runs were quicker. Its wall time is the search's own. Seed 0's two rankings agree."""
    import json
    import tarfile

    from tests.conftest import REPO

    heldout = REPO / "benchmarks" / "heldout"
    with tarfile.open(heldout / "attn_majority_searches.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    stored = [json.loads(x) for x in (heldout / "attn_majority_arms.jsonl").read_text().splitlines() if x.strip()]
    (tmp_path / "attn_majority_arms.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in stored if r["arm"] == "tune_batch"))
    one = bench.rerank_arm("attn_majority", 1, tmp_path)
    default = next(r for r in stored if r["arm"] == "tune_batch" and r["seed"] == 1)
    assert one["as_searched"] and one["differs"] and default["pick"]["batch_size"] == 16
    assert one["pick"]["batch_size"] == 128 and one["pick"]["lr"] == pytest.approx(0.0091, rel=0.01)
    assert one["wall_s"] == default["wall_s"] and "another pick" in one["how"]
    zero = bench.rerank_arm("attn_majority", 0, tmp_path)
    assert zero["as_searched"] and not zero["differs"]


def test_the_paired_rerank_reading_counts_a_shared_pick_as_one_and_a_miss_against_it(bench) -> None:
    a, b, c = {"batch_size": 16, "lr": 0.01}, {"batch_size": 128, "lr": 0.01}, {"batch_size": 64, "lr": 0.1}
    times = {bench.key(a): [4.0, 4.2, 3.8], bench.key(b): [2.0, 2.1, 1.9], bench.key(c): [math.inf] * 3}

    def rows(pairs):
        out = []
        for s, (tb, rr) in enumerate(pairs):
            out += [{"arm": "tune_batch", "seed": s, "pick": tb}, {"arm": "tune_batch_rerank", "seed": s, "pick": rr}]
        return out

    # five of six re-ranked to the config twice as quick: the median is 0.5 and beyond noise
    quick = bench.paired_rerank(rows([(a, b)] * 5 + [(a, a)]), times, reps=400)
    assert quick["ratio"] == pytest.approx(0.5, rel=0.06) and quick["hi"] < 1.0
    assert quick["differ"] == 5 and quick["searches"] == 6 and quick["verdict"] == "runs"
    # four of six: a resample holds four same picks often enough that the interval reaches 1
    four = bench.paired_rerank(rows([(a, b)] * 4 + [(a, a)] * 2), times, reps=400)
    assert four["ratio"] == pytest.approx(0.5, rel=0.06) and four["hi"] == 1.0 and four["verdict"] == "blend"
    # the same pick everywhere: exactly 1, no interval around it
    same = bench.paired_rerank(rows([(a, a)] * 6), times, reps=400)
    assert (same["ratio"], same["lo"], same["hi"], same["verdict"]) == (1.0, 1.0, 1.0, "blend")
    # quicker where they differ, but one re-ranked pick never reaches the target: a miss more, the blend stays
    missed = bench.paired_rerank(rows([(a, b)] * 4 + [(a, c)] + [(a, a)]), times, reps=400)
    assert missed["misses_rerank"] == 1 and missed["misses_default"] == 0 and missed["verdict"] == "blend"
    # two differ out of six: the median is 1, inside the noise
    few = bench.paired_rerank(rows([(a, b)] * 2 + [(a, a)] * 4), times, reps=400)
    assert few["ratio"] == 1.0 and few["hi"] >= 1.0 and few["verdict"] == "blend"
    assert bench.paired_rerank([{"arm": "tune_batch", "seed": 0, "pick": a}], times) is None
    # the same reading for another arm against the default (the horizon searches re-decided by their runs)
    other = [{**r, "arm": "tune_batch_horizon_runs"} if r["arm"] == "tune_batch_rerank" else r
             for r in rows([(a, b)] * 5 + [(a, a)])]
    assert bench.paired_rerank(other, times, reps=400) is None
    assert bench.paired_rerank(other, times, reps=400, arm="tune_batch_horizon_runs") == quick
