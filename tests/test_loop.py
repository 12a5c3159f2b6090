"""The training loop users run: any optimizer with warm-up, mixed precision, gradient
accumulation (fixed and automatic under a memory cap), channels-last, compilation, and the
user's own step and evaluation (a non-classification workload)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import tiny_config
from tune_batch.config import load_config
from tune_batch.errors import ConfigError
from tune_batch.pipeline.search import search
from tune_batch.store.records import Status
from tune_batch.trial import run_trial
from tune_batch.trial.loop import Recipe, Stepper, batch_len, make_optimizer, split_batch

REPO = Path(__file__).resolve().parents[1]
P = {"batch_size": 32, "lr": 0.05, "num_gpus": 1}


def test_batches_of_any_structure_split_into_micro_batches() -> None:
    batch = {"ids": torch.arange(8).reshape(4, 2), "meta": ("a", torch.ones(4))}
    parts = split_batch(batch, 2)
    assert batch_len(batch) == 4 and [batch_len(p) for p in parts] == [2, 2]
    assert parts[1]["ids"].tolist() == [[4, 5], [6, 7]] and parts[0]["meta"][0] == "a"


def _stepper(recipe: Recipe, lr: float = 0.1) -> tuple[nn.Module, Stepper]:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)  # no BatchNorm: micro-batches give the whole batch's gradient
    x, y = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return model, Stepper(model, opt, iter([(x, y)] * 10), torch.device("cpu"), math.inf, None, 8, recipe)


def test_accumulation_gives_the_whole_batch_step_and_warmup_ramps_the_lr() -> None:
    whole, s1 = _stepper(Recipe())
    micro, s4 = _stepper(Recipe(accumulation=4))
    s1.step()
    s4.step()
    for a, b in zip(whole.parameters(), micro.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert s1.last_loss == pytest.approx(s4.last_loss, abs=1e-6)
    _, warm = _stepper(Recipe(warmup_steps=4), lr=0.2)
    lrs = []
    for _ in range(5):
        warm.step()
        lrs.append(warm.opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2])


def test_optimizers_by_name_with_their_arguments() -> None:
    cfg = tiny_config(optimizer={"name": "AdamW", "weight_decay": 0.01, "kwargs": {"betas": [0.8, 0.9]}})
    opt = make_optimizer(cfg, nn.Linear(2, 2).parameters(), 0.01)
    assert isinstance(opt, torch.optim.AdamW) and tuple(opt.defaults["betas"]) == (0.8, 0.9)
    assert opt.defaults["weight_decay"] == 0.01
    with pytest.raises(ConfigError, match="optimizer.name = 'lbfgs': allowed: sgd, adam, adamw"):
        tiny_config(optimizer={"name": "lbfgs"})
    with pytest.raises(ConfigError, match="train.accumulation = 0"):
        tiny_config(train={"accumulation": 0})
    with pytest.raises(ConfigError, match="objective 'val_loss' is not measured by the built-in evaluation"):
        tiny_config(objectives=[{"metric": "val_loss", "direction": "minimize"}])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trials_run_and_say_so(precision: str) -> None:
    cfg = tiny_config(train={"precision": precision}, optimizer={"name": "adamw", "warmup_steps": 5})
    r = run_trial(cfg, {**P, "lr": 0.003})
    assert r.status is Status.OK, r.reason
    assert r.info.precision == precision and r.info.optimizer == "adamw"
    assert r.metrics.val_acc > 0.3 and math.isfinite(r.info.final_loss)


@pytest.mark.slow
def test_mfu_is_held_against_the_peak_of_the_trials_precision() -> None:
    r = run_trial(tiny_config(train={"precision": "bf16"}, resources={"peak_flops": None}), P)
    assert r.status is Status.OK, r.reason
    assert "in bfloat16" in r.info.peak_source and r.metrics.mfu > 0


def test_channels_last_and_fixed_accumulation_are_recorded() -> None:
    r = run_trial(tiny_config(train={"channels_last": True, "accumulation": 4}), P)
    assert r.status is Status.OK, r.reason
    assert r.info.accumulation_steps == 4 and r.info.micro_batch_size == 8


@pytest.mark.slow
def test_auto_accumulation_trains_every_batch_size_under_a_cap_that_cuts_half() -> None:
    space = {"batch_size": [16, 32, 64, 128]}
    cap = {"device_memory": "6144KiB"}
    plain = [run_trial(tiny_config(space=space, resources=cap), {**P, "batch_size": b}) for b in (64, 128)]
    assert [r.status for r in plain] == [Status.OOM, Status.OOM]  # the upper half, without accumulation
    auto = tiny_config(space=space, resources=cap, train={"accumulation": "auto"})
    runs = {b: run_trial(auto, {**P, "batch_size": b}) for b in (16, 32, 64, 128)}
    assert all(r.status is Status.OK for r in runs.values()), {b: r.reason for b, r in runs.items()}
    assert runs[16].info.accumulation_steps == 1 and runs[128].info.accumulation_steps > 1
    assert all(r.metrics.peak_mem_bytes <= 6144 * 2**10 for r in runs.values())
    assert all(r.info.micro_batch_size * r.info.accumulation_steps == b for b, r in runs.items())


def test_compiled_trial_keeps_compile_time_out_of_the_window() -> None:
    r = run_trial(tiny_config(train={"compile": "default"}, budget={"train_samples": 512}), P)
    assert r.status is Status.OK, r.reason
    assert r.info.compile_s is not None and r.info.compile_s > 10 * r.metrics.step_time_s
    assert r.info.warmup_steps >= 3


@pytest.mark.slow
def test_a_language_model_with_its_own_step_and_evaluation(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "tiny_lm.yaml",
                      ["search.backend=optuna", "budget.trials=3", "repeats.seeds=0", "budget.train_samples=1024",
                       "resources.peak_flops=1e11", "confirm.seeds=1", "confirm.train_samples=2048",
                       "confirm.evaluations=4"])
    res = search(cfg, tmp_path / "run", quiet=True)
    recs = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    runs = [r for r in recs if r["info"].get("confirm_of") not in (None, "baseline")]
    assert [r["trial_id"] for r in recs if r["info"].get("confirm_of") == "baseline"] == ["baseline-c0"]
    recs = [r for r in recs if r["info"].get("confirm_of") is None]
    ok = [r for r in recs if r["status"] == "ok"]
    assert len(recs) == 3 and ok
    # time to target on val_loss, minimised: the curves fall, the target lies between their first
    # validation and the best any run reached, and each candidate that reached it says when
    conf = json.loads((tmp_path / "run" / "pareto.json").read_text())["confirmation"]
    assert conf["target_metric"] == "val_loss" and conf["target_direction"] == "minimize"
    # two candidates, and the second look's replacement of one that did not reach the target
    ids = {c["trial_id"] for c in conf["candidates"]}
    assert len(runs) == 2 + len(conf["replaced"]) and all(
        {x["trial_id"], x["replaced_by"]} <= ids for x in conf["replaced"]), conf["replaced"]
    assert all(r["status"] == "ok" and r["metrics"]["val_loss"] > 0 for r in runs)
    firsts = [r["info"]["curve"][0][2] for r in runs]
    best = min(c[2] for r in runs for c in r["info"]["curve"])
    assert best < conf["target"] < max(firsts)
    reached = [c for c in conf["candidates"] if c["time_to_target_s"] is not None]
    assert reached and all(min(curve["val_loss"]) <= conf["target"] for c in reached for curve in c["curves"])
    assert res.report.method.startswith("time_to_target") and "val_loss" in res.report.method
    for r in ok:
        assert math.isfinite(r["metrics"]["val_loss"]) and r["metrics"]["val_perplexity"] > 1
        assert r["info"]["optimizer"] == "adamw" and r["metrics"]["mfu"] > 0  # FLOPs counted through the step
    assert res.recommended is not None and "val_loss" in json.loads((tmp_path / "run" / "pareto.json").read_text())[
        "trials"][0]["metrics"]


def test_the_ladder_scales_the_lr_by_the_optimizer_family() -> None:
    from tune_batch.study.space import seed_points

    sgd = tiny_config(search={"seed_ladder": True}, budget={"trials": 9})
    adam = tiny_config(search={"seed_ladder": True}, budget={"trials": 9}, optimizer={"name": "adam"})
    (s16, s64), (a16, a64) = seed_points(sgd)[:2], seed_points(adam)[:2]
    assert (s16["batch_size"], s64["batch_size"]) == (16, 64) == (a16["batch_size"], a64["batch_size"])
    assert s64["lr"] / s16["lr"] == pytest.approx(4.0) or s64["lr"] == sgd.space.lr.high  # linear for SGD
    assert a64["lr"] / a16["lr"] == pytest.approx(2.0)  # square root for Adam


@pytest.mark.slow
def test_builders_step_and_evaluate_as_python_callables(tmp_path: Path) -> None:
    """What a notebook user does: functions defined right here (Ray ships them by value)."""
    from torch.utils.data import TensorDataset

    from tune_batch.config import config_from_dict

    def my_model(num_classes: int = 3, hidden: int = 16) -> nn.Module:
        return nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def my_data(n: int = 1024) -> tuple:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n + 256, 8, generator=g)
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
        return TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])

    def my_step(model, batch, device):
        x, y = batch
        return nn.functional.cross_entropy(model(x.to(device)), y.to(device))

    def my_eval(model, loader, device):
        right = total = 0
        for x, y in loader:
            right += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
            total += len(y)
        return {"val_acc": right / total, "val_error": 1 - right / total}

    raw = tiny_config(data={"name": "digits", "val_samples": 256}).to_dict()
    raw["model"] = {"name": "x", "num_classes": 3, "kwargs": {"hidden": 16}}
    raw["data"] = {"name": "x", "val_samples": 256, "resize": None}
    raw["objectives"] = [{"metric": "samples_per_s"}, {"metric": "val_error", "direction": "minimize"}]
    for backend in ("optuna", "ray"):
        cfg = config_from_dict({**raw, "search": {"backend": backend, "seed": 0}, "budget": {
            **raw["budget"], "trials": 1, "train_samples": 512}}, model=my_model, data=my_data, step=my_step,
            evaluate=my_eval)
        assert cfg.model.name.startswith("callable:") and cfg.train.step.startswith("callable:")
        search(cfg, tmp_path / backend, quiet=True)
        recs = [json.loads(x) for x in (tmp_path / backend / "trials.jsonl").read_text().splitlines()]
        assert len(recs) == 1 and all(r["status"] == "ok" for r in recs), [r["reason"] for r in recs]
        assert all(0 <= r["metrics"]["val_error"] <= 1 for r in recs)
