"""samplers.ScaledProbe: after the random start, gp and tpe first propose what scaling the best
config so far would, then the model's picks. Trials here are looked up from a known function
(no training): what is tested is which configs the sampler proposes."""

from __future__ import annotations

import math
import pickle

import optuna
import pytest

from tests.conftest import tiny_config
from tune_batch.backends.local import Objective, optimize
from tune_batch.store.records import Metrics, Status, TrialInfo, TrialResult
from tune_batch.study.samplers import ScaledProbe, make_sampler, probe_rule, startup_trials

optuna.logging.set_verbosity(optuna.logging.WARNING)

DIVERGES_ABOVE = 0.15


def _ridge(config, params, *, trial_id, extra, run_dir):
    """val_acc peaks at lr = 0.02 x batch / 16 (the linear rule) and falls off in log lr; every
    rate above DIVERGES_ABOVE diverges; samples/s grows with the batch."""
    b, lr = params.batch_size, params.lr
    if lr > DIVERGES_ABOVE:
        return TrialResult(trial_id, params, Status.DIVERGED, "loss nan (looked up)")
    acc = math.exp(-math.log(lr / (0.02 * b / 16)) ** 2)
    return TrialResult(trial_id, params, Status.OK,
                       metrics=Metrics(samples_per_s=100.0 * b, device_util=0.5, val_acc=acc, peak_mem_bytes=1),
                       info=TrialInfo(train_s=1.0))


def _search(name: str, probe: str | None, n: int, start: list[tuple[int, float]]) -> optuna.Study:
    cfg = tiny_config(space={"batch_size": [16, 32, 64, 128], "lr": {"low": 0.001, "high": 0.2}})
    assert startup_trials(n) == len(start)
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(name, 0, n, probe))
    for b, lr in start:  # the random start, fixed so that the probes are known
        study.enqueue_trial({"batch_size": b, "lr": lr, "num_gpus": 1})
    optimize(study, Objective(cfg, runner=_ridge, free_skips=True), n)
    return study


@pytest.mark.parametrize("name", ["gp", "tpe"])
def test_the_probe_climbs_the_best_rate_then_carries_it_to_larger_batches_below_the_edge(name: str) -> None:
    start = [(16, 0.005), (64, 0.002), (128, 0.01)]
    study = _search(name, "linear", 11, start)
    trials = study.get_trials()
    probes = [(t.params["batch_size"], t.params["lr"]) for t in trials if t.system_attrs.get(ScaledProbe.ATTR)]
    step, near, top = ScaledProbe.STEP, ScaledProbe.NEAR, 0.2
    lr1 = math.sqrt(0.005 * top)      # 6.3x above the anchor (16, 0.005): half the way to the range's top
    lr2 = math.sqrt(lr1 * top)        # the new anchor, climbed half the way again (2.51x, above STEP)
    expected = [
        (16, lr1),
        (16, lr2),                    # worse than lr1 at 16: past the peak, 16's edge
        # the walk starts at the far end: linear (8 lr1) comes within NEAR of 128's edge (lr2 x
        # sqrt 8), a STEP below it; two readings there already (the start's and this): no second
        (128, lr2 * math.sqrt(8) / step),
        (64, lr2 * 2 / step),         # the size farthest from 16 and 128; linear (4 lr1) near 64's edge
        # (64, ...) is the most accurate: the anchor; not climbed (its edge is near), 128 near its
        # probe; one batch size down at the anchor's rate, under 32's edge (lr2 x sqrt 2 / NEAR)
        (32, lr2 * 2 / step),
    ]
    assert probes == [(b, pytest.approx(lr)) for b, lr in expected]
    assert lr2 * 2 / step < lr2 * math.sqrt(2) / near < DIVERGES_ABOVE
    # no probe diverged; the walk down then finds 64 near its last probe there: the model's turn
    assert [t.user_attrs["status"] for t in trials if t.system_attrs.get(ScaledProbe.ATTR)] == ["ok"] * 5
    assert len(trials) == 11
    # the first proposals after the start were the probe's, none of the random start was
    assert [t.system_attrs.get(ScaledProbe.ATTR, False) for t in trials[:4]] == [False, False, False, True]


def _held(config, params, *, trial_id, extra, run_dir):
    """val_acc peaks at lr 0.03 at every batch size (the rate held by stability, not scaled
    with the batch), lower for a larger batch; nothing diverges."""
    b, lr = params.batch_size, params.lr
    acc = math.exp(-math.log(lr / 0.03) ** 2) * (1 - 0.1 * math.log2(b / 16))
    return TrialResult(trial_id, params, Status.OK,
                       metrics=Metrics(samples_per_s=100.0 * b, device_util=0.5, val_acc=acc, peak_mem_bytes=1),
                       info=TrialInfo(train_s=1.0))


@pytest.mark.parametrize("name", ["gp", "tpe"])
def test_the_walk_starts_at_the_far_end_and_reads_it_twice(name: str) -> None:
    cfg = tiny_config(space={"batch_size": [16, 32, 64, 128, 256], "lr": {"low": 0.001, "high": 1.0}})
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(name, 0, 9, "linear"))
    for b, lr in [(16, 0.03), (32, 0.001), (64, 0.3)]:
        study.enqueue_trial({"batch_size": b, "lr": lr, "num_gpus": 1})
    optimize(study, Objective(cfg, runner=_held, free_skips=True), 9)
    probes = [(t.params["batch_size"], t.params["lr"]) for t in study.get_trials()
              if t.system_attrs.get(ScaledProbe.ATTR)]
    step, near = ScaledProbe.STEP, ScaledProbe.NEAR
    up = 0.03 * math.sqrt(1.0 / 0.03)  # the climb at 16, half the way to the top: past the peak, 16's edge
    far = up * math.sqrt(16) / step   # linear (16 x 0.03) within NEAR of 256's edge (up x 4): a STEP below it
    assert 0.03 * 16 > up * 4 / near
    # the largest batch size first, 16x the anchor's: one reading, then a second a STEP lower
    assert probes[:3] == [(16, pytest.approx(up)), (256, pytest.approx(far)), (256, pytest.approx(far / step))]
    at_256 = [t.user_attrs["metric:val_acc"] for t in study.get_trials() if t.params["batch_size"] == 256]
    assert at_256[1] > 10 * at_256[0]  # the extrapolation overshot; the second reading is the better one
    # then the middle of the walk: 64, the size farthest (log) from 16 and 256
    assert probes[3][0] == 64


def _plateau(config, params, *, trial_id, extra, run_dir):
    """Every batch size diverges above lr 0.05; val_acc peaks at lr 0.04 and is higher for a
    smaller batch (more steps of the same sample budget)."""
    b, lr = params.batch_size, params.lr
    if lr > 0.05:
        return TrialResult(trial_id, params, Status.DIVERGED, "loss nan (looked up)")
    acc = math.exp(-math.log(lr / 0.04) ** 2) * (1 - b / 512)
    return TrialResult(trial_id, params, Status.OK,
                       metrics=Metrics(samples_per_s=100.0 * b, device_util=0.5, val_acc=acc, peak_mem_bytes=1),
                       info=TrialInfo(train_s=1.0))


@pytest.mark.parametrize("name", ["gp", "tpe"])
def test_the_probe_walks_down_at_the_anchors_rate_when_a_smaller_batch_trains_further(name: str) -> None:
    cfg = tiny_config(space={"batch_size": [16, 32, 64, 128], "lr": {"low": 0.001, "high": 0.3}})
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(name, 0, 9, "linear"))
    for b, lr in [(128, 0.04), (16, 0.001), (32, 0.002)]:
        study.enqueue_trial({"batch_size": b, "lr": lr, "num_gpus": 1})
    optimize(study, Objective(cfg, runner=_plateau, free_skips=True), 9)
    trials = study.get_trials()
    probes = [(t.params["batch_size"], t.params["lr"]) for t in trials if t.system_attrs.get(ScaledProbe.ATTR)]
    # climbed half the way to the range's top (2.7x, above STEP; diverges; nothing larger than
    # 128), then down one batch size at a time at the anchor's rate, each better than the last
    # (0.04 stays under the edge: a rate too high at 128 is too high at a smaller batch size);
    # then nothing is left to probe: the model's turn
    assert probes == [(128, pytest.approx(math.sqrt(0.04 * 0.3))), (64, 0.04), (32, 0.04), (16, 0.04)]
    assert not trials[-1].system_attrs.get(ScaledProbe.ATTR) and len(trials) == 9


def test_the_probe_skips_a_batch_size_that_ran_out_of_memory_and_leaves_the_rest_to_the_model() -> None:
    def oom_at_64(config, params, **kw):
        if params.batch_size >= 64:
            return TrialResult(kw["trial_id"], params, Status.OOM, "CUDA out of memory (looked up)")
        return _ridge(config, params, **kw)

    cfg = tiny_config(space={"batch_size": [16, 32, 64, 128], "lr": {"low": 0.001, "high": 0.3}})
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler("tpe", 0, 9, "linear"))
    for b, lr in [(64, 0.04), (16, 0.01), (32, 0.01)]:
        study.enqueue_trial({"batch_size": b, "lr": lr, "num_gpus": 1})
    optimize(study, Objective(cfg, runner=oom_at_64, free_skips=True), 9)
    probed = [t.params["batch_size"] for t in study.get_trials() if t.system_attrs.get(ScaledProbe.ATTR)]
    assert probed and 64 not in probed and 128 not in probed
    ran = [t for t in study.get_trials() if not t.user_attrs.get("free_skip")]
    assert len(ran) == 9 and any(not t.system_attrs.get(ScaledProbe.ATTR) for t in ran[3:])  # the model's turn came


def test_the_probe_follows_the_config() -> None:
    assert probe_rule(tiny_config()) == "linear"
    assert probe_rule(tiny_config(optimizer={"name": "adam"})) == "sqrt"
    assert probe_rule(tiny_config(search={"scale_probe": False})) is None
    # the learning rate decides nothing a throughput-only search scores: no probe
    assert probe_rule(tiny_config(objectives=[{"metric": "samples_per_s", "direction": "maximize"}])) is None
    assert not isinstance(make_sampler("gp", 0, 9, None), ScaledProbe)
    assert not isinstance(make_sampler("random", 0, 9, "linear"), ScaledProbe)
    with pytest.raises(ValueError, match="allowed: linear, sqrt"):
        make_sampler("gp", 0, 9, "cubic")
    study = _search("tpe", None, 9, [(16, 0.005), (64, 0.002), (128, 0.01)])
    assert not any(t.system_attrs.get(ScaledProbe.ATTR) for t in study.get_trials())


def _two_workers_faster(config, params, **kw):
    """_ridge, with two workers 1.6x the samples/s of one."""
    r = _ridge(config, params, **kw)
    if r.status is Status.OK and params.num_gpus == 2:
        r = TrialResult(r.trial_id, params, r.status, metrics=Metrics(
            samples_per_s=1.6 * r.metrics.samples_per_s, device_util=0.5, val_acc=r.metrics.val_acc,
            peak_mem_bytes=1), info=r.info)
    return r


@pytest.mark.parametrize("name", ["gp", "tpe", "nsga2", "random"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.slow
def test_a_search_over_gpu_counts_runs_to_its_budget(name: str, seed: int) -> None:
    """num_gpus [1, 2]: the probe hands the model num_gpus alone, the model's own turns the whole
    space; the GP sampler's cached kernels of one dimension must not meet the other (it raised
    IndexError in Optuna's GP fit after 9 trials of the quickstart)."""
    cfg = tiny_config(space={"batch_size": [16, 32, 64, 128], "lr": {"low": 0.001, "high": 0.2},
                             "num_gpus": [1, 2]})
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(name, seed, 14, probe_rule(cfg)))
    study.enqueue_trial({"batch_size": 16, "lr": 0.01, "num_gpus": 2})  # below 16 per GPU: skipped
    optimize(study, Objective(cfg, runner=_two_workers_faster, free_skips=True), 14)
    ran = [t for t in study.get_trials() if not t.user_attrs.get("free_skip")]
    assert len(ran) == 14
    assert any(t.user_attrs["status"] == "skipped" for t in study.get_trials())
    assert {t.params["num_gpus"] for t in ran if t.user_attrs["status"] == "ok"} == {1, 2}
    # Tune pickles the searcher that holds the sampler (Optuna 5.1's NSGA-II held an unpicklable
    # lock); once loaded again it goes on proposing
    again = pickle.loads(pickle.dumps(study.sampler))
    study.sampler = again
    optimize(study, Objective(cfg, runner=_two_workers_faster, free_skips=True), 2)
    assert len([t for t in study.get_trials() if not t.user_attrs.get("free_skip")]) == 16


@pytest.mark.parametrize("name", ["nsga2", "gp"])
@pytest.mark.slow
def test_a_proposal_of_measured_params_is_not_trained_again(name: str) -> None:
    """Every search trial trains with search.seed, so a proposal of params already measured would
    measure the same thing again (NSGA-II's crossover on a small population re-proposes parents;
    4 of a quickstart search's 12 trials were copies): it is skipped, uses no trial of the
    budget, and the sampler is told the earlier result, feasible."""
    cfg = tiny_config(space={"batch_size": [16, 32, 64, 128], "lr": {"low": 0.001, "high": 0.2}})
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(name, 0, 12, probe_rule(cfg)))
    study.enqueue_trial({"batch_size": 32, "lr": 0.01, "num_gpus": 1})
    study.enqueue_trial({"batch_size": 32, "lr": 0.01, "num_gpus": 1})  # the same again: a duplicate for sure
    objective = Objective(cfg, runner=_ridge, free_skips=True)
    optimize(study, objective, 12)
    counted = [r for r in objective.records if r.counted]
    assert len(counted) == 12
    keys = [(r.params.batch_size, r.params.lr) for r in counted if r.status is Status.OK]
    assert len(keys) == len(set(keys))  # no config trained twice
    dups = [r for r in objective.records if (r.reason or "").startswith("duplicate:")]
    assert dups and all(r.status is Status.SKIPPED and r.info.free_skip for r in dups)
    assert dups[0].trial_id == 1 and "trial 0 measured these params" in dups[0].reason
    by_number = {t.number: t for t in study.get_trials()}
    for r in dups:  # told as the trial it repeats, feasible
        t = by_number[r.trial_id]
        same = next(x for x in counted if (x.params.batch_size, x.params.lr) == (r.params.batch_size, r.params.lr))
        assert t.values == by_number[same.trial_id].values and t.system_attrs["constraints"] == [0.0, 0.0, 0.0]
    from tune_batch.decide.recommend import decide
    from tune_batch.output.text import render_summary

    assert f"{len(dups)} repeating a measured trial's params" in render_summary(decide(cfg, objective.records))
