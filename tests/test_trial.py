"""The trial runner, for real: small_cnn trains on digits on this CPU."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import tiny_config
from tune_batch.analysis import objectives
from tune_batch.store.records import Params, TrialResult
from tune_batch.study.admission import Policy
from tune_batch.trial import run_trial


def test_trial_on_digits_learns_and_measures_everything(tiny) -> None:
    res = run_trial(tiny, {"batch_size": 16, "lr": 0.05, "num_gpus": 1}, trial_id=7)
    assert res.status == "ok", res.reason
    m = res.metrics
    assert m.val_acc > 0.5  # chance is 0.1
    assert m.samples_per_s > 0 and math.isfinite(m.samples_per_s)
    assert 0 < m.device_util <= 1
    assert 0 <= m.data_wait_frac < 1
    assert m.peak_mem_bytes > 0
    assert res.info.steps == 1024 // 16 and res.info.warmup_steps == 2
    ext = (res.info.window_extension_steps or 0)  # only with budget.min_window_s (on by default on CUDA)
    assert res.info.timed_samples == (64 - 2 + ext) * 16
    assert res.info.train_samples_done == 1024
    assert res.info.device.startswith("cuda" if torch.cuda.is_available() else "cpu")
    # samples_per_s is the timed samples over the timed window, nothing else
    assert m.samples_per_s == pytest.approx(res.info.timed_samples / m.timed_s)
    assert res.duration_s >= m.timed_s
    rec = res.to_record()
    assert TrialResult.from_record(rec) == res
    assert objectives.constraints(res) == {"memory": 0.0, "space": 0.0, "diverged": 0.0}


def test_short_window_is_lengthened_without_changing_training() -> None:
    base = tiny_config(budget={"train_samples": 512, "min_window_s": 0})
    plain = run_trial(base, {"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    assert plain.status == "ok", plain.reason
    assert plain.info.window_extension_steps is None
    want = 3 * plain.metrics.timed_s + 0.2
    longer = run_trial(tiny_config(budget={"train_samples": 512, "min_window_s": want}),
                       {"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    assert longer.status == "ok", longer.reason
    extra = longer.info.window_extension_steps
    assert extra > 0
    assert longer.metrics.timed_s >= want  # topped up by the clock: at least the minimum, whatever the load
    assert longer.info.timed_steps == plain.info.timed_steps + extra
    assert longer.metrics.samples_per_s == pytest.approx(longer.info.timed_samples / longer.metrics.timed_s)
    # the weights were put back: training saw exactly train_samples, as without the extension
    assert longer.info.train_samples_done == plain.info.train_samples_done == 512
    assert longer.metrics.val_acc == plain.metrics.val_acc
    assert longer.info.final_loss == plain.info.final_loss


def test_the_default_window_is_two_seconds_on_cuda_and_one_on_a_cpu() -> None:
    from tune_batch.config import BudgetConfig

    assert BudgetConfig().min_window_s is None
    assert BudgetConfig().window_floor("cuda") == 2.0
    assert BudgetConfig().window_floor("cpu") == 1.0
    assert BudgetConfig(min_window_s=0.5).window_floor("cuda") == 0.5  # a set value wins everywhere
    assert BudgetConfig(min_window_s=0).window_floor("cpu") == 0
    # a real trial with the default: its window is topped up to the device's floor
    res = run_trial(tiny_config(budget={"train_samples": 256, "min_window_s": None}),
                    {"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    assert res.status == "ok", res.reason
    assert res.metrics.timed_s >= BudgetConfig().window_floor("cuda" if res.info.device.startswith("cuda") else "cpu")


def test_extension_steps_rule() -> None:
    from tune_batch.trial.window import extension_steps as _extension_steps

    assert _extension_steps(1.5, 0.05, 1000.0) == 30  # 0.05 s/step, 1.5 s to go
    assert _extension_steps(-0.5, 0.05, 1000.0) == 0  # the window is long enough
    assert _extension_steps(1.5, 0.05, 0.0) == 0  # no time left before the deadline
    assert _extension_steps(100.0, 0.05, 1.0) == 20  # never more than the room left
    assert _extension_steps(0.001, 0.05, 1000.0) == 1  # a missing sliver still takes a step


def test_equal_sample_budget_across_batch_sizes(tiny) -> None:
    a = run_trial(tiny, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    b = run_trial(tiny, {"batch_size": 64, "lr": 0.05, "num_gpus": 1})
    assert a.info.train_samples_done == b.info.train_samples_done == 1024
    assert a.info.steps == 4 * b.info.steps


def test_oom_inside_a_trial_is_status_oom_not_an_error() -> None:
    cfg = tiny_config(model={"name": "tests.workloads:oom_above", "kwargs": {"limit": 32}})
    fits = run_trial(cfg, {"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    assert fits.status == "ok", fits.reason
    res = run_trial(cfg, {"batch_size": 64, "lr": 0.05, "num_gpus": 1})
    assert res.status == "oom"
    assert "OutOfMemoryError" in res.reason
    assert res.traceback is None
    assert objectives.constraints(res)["memory"] > 0
    assert objectives.values(cfg, res) == [0.0, 0.0, 0.0]


def test_memory_cap_ends_the_trial_as_oom() -> None:
    cfg = tiny_config(resources={"device_memory": "1MiB"})
    res = run_trial(cfg, {"batch_size": 64, "lr": 0.05, "num_gpus": 1})
    assert res.status == "oom"
    if torch.cuda.is_available():  # the allocator refuses past set_per_process_memory_fraction
        assert "CUDA out of memory" in res.reason
    else:  # the profiled step's peak is held against the cap
        assert "exceeds the cap of 1.0 MiB" in res.reason


def test_nan_loss_is_diverged_and_infeasible() -> None:
    cfg = tiny_config()
    res = run_trial(cfg, {"batch_size": 16, "lr": 1e12, "num_gpus": 1})
    assert res.status == "diverged" and res.traceback is None
    assert "non-finite loss" in res.reason or "NaN in BatchNorm" in res.reason
    assert objectives.constraints(res) == {"memory": 0.0, "space": 0.0, "diverged": 1.0}
    assert objectives.values(cfg, res) == [0.0, 0.0, 0.0]  # told as infeasible, not as a FAIL


def test_timeout_is_failed() -> None:
    cfg = tiny_config(budget={"trial_timeout_s": 0.05, "train_samples": 4096})
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    assert res.status == "failed" and res.reason.startswith("timeout")


def test_other_exceptions_are_failed_with_traceback() -> None:
    cfg = tiny_config(model={"name": "tests.workloads:raising_model", "kwargs": {}})
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1})
    assert res.status == "failed"
    assert res.reason == "ValueError: boom from the user's model"
    assert "Traceback" in res.traceback and "boom" in res.traceback


def test_rule_breaking_combination_is_skipped_without_training(tiny) -> None:
    # the policy decides before anything is measured
    res = Policy(tiny).skip(Params(16, 0.05, 2), trial_id=5)
    assert res.status == "skipped"
    assert "min_batch_per_gpu 16 x num_gpus 2 = 32" in res.reason
    assert res.info.train_s == 0.0 and res.duration_s == 0.0 and res.trial_id == 5
    assert objectives.constraints(res) == {"memory": 0.0, "space": 1.0, "diverged": 0.0}
    assert Policy(tiny).skip(Params(32, 0.05, 2), trial_id=6) is None


def test_a_batch_the_budget_gives_one_step_is_skipped_as_a_batch_rule() -> None:
    # it could only fail; as a skip the sampler learns it is infeasible and no trial is used up
    cfg = tiny_config(budget={"train_samples": 256}, space={"batch_size": [16, 32, 64, 128, 256]})
    res = Policy(cfg).skip(Params(256, 0.05, 1), trial_id=3)
    assert res.status == "skipped" and res.reason.startswith("space: budget.train_samples = 256 gives 1 step(s)")
    assert objectives.constraints(res)["space"] == 1.0
    assert Policy(cfg).skip(Params(128, 0.05, 1), trial_id=4) is None


def test_threads_are_restored_after_a_trial(tiny) -> None:
    before = torch.get_num_threads()
    run_trial(tiny, {"batch_size": 64, "lr": 0.05, "num_gpus": 1}, threads=1)
    assert torch.get_num_threads() == before


def test_profiled_steps_write_a_trace_and_stay_out_of_the_window(tmp_path) -> None:
    cfg = tiny_config(profile={"enabled": True, "wait": 1, "warmup": 1, "active": 2, "repeat": 1})
    res = run_trial(cfg, {"batch_size": 16, "lr": 0.05, "num_gpus": 1}, trial_id=3, run_dir=tmp_path)
    assert res.status == "ok", res.reason
    assert res.info.profiled_steps == 4
    # profiled steps run after validation, outside the budget: the window keeps every budget step
    assert res.info.timed_steps == 64 - 2 + (res.info.window_extension_steps or 0)
    traces = list((tmp_path / "traces" / "3").glob("*.json"))
    assert traces, "no trace file written"
    import json

    assert json.loads(traces[0].read_text())["traceEvents"]


@pytest.mark.slow
def test_measurement_never_touches_training(tmp_path) -> None:
    # profiling on and a window lengthened by extra steps, against neither: the model that
    # val_acc sees is the one train_samples of training left, exactly
    plain_cfg = tiny_config(budget={"train_samples": 512, "min_window_s": 0}, profile={"enabled": False})
    plain = run_trial(plain_cfg, {"batch_size": 32, "lr": 0.05, "num_gpus": 1}, trial_id=0, run_dir=tmp_path)
    # a minimum window far beyond the budget's own (20x): extended whatever the machine's load
    measured_cfg = tiny_config(budget={"train_samples": 512, "min_window_s": max(1.5, 20 * plain.metrics.timed_s)},
                               profile={"enabled": True, "wait": 1, "warmup": 1, "active": 2})
    measured = run_trial(measured_cfg, {"batch_size": 32, "lr": 0.05, "num_gpus": 1}, trial_id=1, run_dir=tmp_path)
    assert plain.status == measured.status == "ok", (plain.reason, measured.reason)
    assert measured.info.window_extension_steps and measured.info.profiled_steps == 4
    assert measured.info.trace_dir and plain.info.trace_dir is None
    assert measured.metrics.val_acc == plain.metrics.val_acc
    assert measured.info.final_loss == plain.info.final_loss
