"""``train.loop``: trials in the user's Lightning, Transformers and Keras trainers, measured by a
callback, and the recommendation exported back into each trainer's terms."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import REPO
from tune_batch.config import config_from_dict, load_config
from tune_batch.errors import ConfigError, WorkloadError
from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult

B = "tests.trainer_builders:"


def need(package: str) -> None:
    """Skip unless ``package`` is installed (found, not imported: Keras must first be imported
    by the keras loop, on the torch backend)."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install 'tune-batch[dev]')")


def trainer_config(loop: str, builder: str, kwargs: dict[str, Any] | None = None, **sections: Any) -> Any:
    """A trainer-loop config that trains in seconds on this CPU."""
    raw: dict[str, Any] = {
        "name": "t",
        "train": {"loop": loop, "builder": B + builder, "builder_kwargs": kwargs or {}},
        "space": {"batch_size": [16, 32, 64], "lr": {"low": 0.01, "high": 0.1}},
        "objectives": [{"metric": "samples_per_s"}, {"metric": "val_acc"}],
        "budget": {"trials": 2, "train_samples": 256, "warmup_steps": 2, "trial_timeout_s": 120,
                   "min_window_s": 0},
        "repeats": {"seeds": 0}, "confirm": {"candidates": 0},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return config_from_dict(raw)


def run(config: Any, batch_size: int = 32, lr: float = 0.05) -> TrialResult:
    from tune_batch.trial import run_trial

    return run_trial(config, {"batch_size": batch_size, "lr": lr})


def assert_measured(r: TrialResult, loop: str, metric: str) -> None:
    assert r.status is Status.OK, (r.reason, r.traceback)
    assert r.info.loop == loop
    m = r.metrics
    assert m.samples_per_s is not None and m.samples_per_s > 0
    assert m.peak_mem_bytes is not None and m.peak_mem_bytes > 0
    assert m.device_util is not None and 0 <= m.device_util <= 1
    assert m.value(metric) is not None and math.isfinite(m.value(metric))
    assert r.info.timed_steps == r.info.steps - r.info.warmup_steps
    assert m.timed_s is not None and m.timed_s > 0 and m.samples_per_s_ci is not None
    assert r.info.peak_mem_method and r.info.final_loss is not None and math.isfinite(r.info.final_loss)


# ---------------------------------------------------------------- the config


def test_loop_defaults_to_tune_batch_and_unknown_loops_are_refused() -> None:
    assert config_from_dict({}).train.loop == "tune_batch"
    with pytest.raises(ConfigError, match=r"train.loop = 'flax'.*'tune_batch', 'lightning', 'transformers' or 'keras'"):
        config_from_dict({"train": {"loop": "flax"}})


@pytest.mark.parametrize("train, match", [
    ({"loop": "lightning"}, r"train: loop = 'lightning' needs train.builder"),
    ({"builder": "a.b:c"}, r"builder = 'a.b:c' needs a trainer loop"),
    ({"loop": "keras", "builder": "a.b"}, r"train.builder = 'a.b': allowed: 'pkg.module:function'"),
    ({"loop": "transformers", "builder": "a.b:c", "precision": "bf16"}, r"precision = 'bf16' is tune_batch's own"),
    ({"loop": "lightning", "builder": "a.b:c", "accumulation": 2}, r"accumulation = 2 is tune_batch's own"),
])
def test_trainer_loop_settings_are_checked_at_load(train: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"train": train})


def test_a_trainer_loop_may_aim_at_what_its_evaluation_logs() -> None:
    cfg = trainer_config("transformers", "hf_tiny", objectives=[{"metric": "eval_loss", "direction": "minimize"}])
    assert cfg.metric_names == ["eval_loss"]
    with pytest.raises(ConfigError, match="train.evaluate"):  # tune_batch's own loop measures val_acc only
        config_from_dict({"objectives": [{"metric": "eval_loss", "direction": "minimize"}]})


def test_the_shipped_trainer_configs_load() -> None:
    for name, loop in [("lightning_cnn", "lightning"), ("hf_tiny_gpt2", "transformers"), ("keras_dense", "keras")]:
        assert load_config(REPO / "configs" / f"{name}.yaml").train.loop == loop


def test_a_probe_in_a_trainers_loop_reports_what_it_measured(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`probe` on the shipped Keras config ended in a traceback: its loop counts no FLOPs (mfu None)."""
    need("keras")
    from tune_batch.cli import main

    code = main(["probe", str(REPO / "configs/keras_dense.yaml"), "--batch-size", "64", "--lr", "0.05", "--set",
                 "budget.train_samples=512", "--output", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert code == 0 and "trial probe: ok" in out, out
    assert "mfu               not measured" in out and "not measured: train.loop = keras" in out
    assert "val_acc" in out and "samples_per_s" in out


def test_preflight_refuses_what_a_trainer_loop_cannot_do_yet() -> None:
    need("lightning")
    from tune_batch.pipeline.search import preflight

    # a GPU count is searched in Lightning (a worker group's DDP: test_distributed) and Transformers,
    # not yet in Keras
    assert preflight(trainer_config("lightning", "lightning_cnn", space={"num_gpus": [1, 2]}))
    # a run's length in epochs is passes over the builder's training set (1497 samples): one shorter
    # than a trial is refused once that size is known, as in tune_batch's own loop
    with pytest.raises(ConfigError, match=r"^goal.epochs = 0.1 \(150 samples\) is shorter than one trial"):
        preflight(trainer_config("lightning", "lightning_cnn", confirm={"candidates": 1}, goal={"epochs": 0.1}))
    assert "1497 training samples" in preflight(trainer_config("lightning", "lightning_cnn",
                                                               confirm={"candidates": 1, "epochs": 2.0}))
    need("transformers")
    assert preflight(trainer_config("transformers", "hf_tiny", space={"num_gpus": [1, 2]},
                                    objectives=[{"metric": "eval_loss", "direction": "minimize"}]))
    need("keras")
    with pytest.raises(ConfigError, match=r"space.num_gpus = \[1, 2\]: train.loop = keras runs one device "
                                          r"per trial in this version \(more: lightning, transformers\); "
                                          r"allowed: \[1\]"):
        preflight(trainer_config("keras", "keras_dense", space={"num_gpus": [1, 2]}))


@pytest.mark.parametrize("builder, match", [
    ("not_a_dict", r"train.builder = 'tests.trainer_builders:not_a_dict' returned list; with train.loop = lightning "
                   r"allowed: a dict with keys module, train"),
    ("lightning_without_train", r"returned no 'train'; with train.loop = lightning allowed"),
    ("lightning_with_plain_module", r"returned module = Sequential; .* allowed: a lightning.pytorch.LightningModule"),
])
def test_a_builder_returning_the_wrong_thing_is_one_line(builder: str, match: str) -> None:
    need("lightning")
    from tune_batch.pipeline.search import preflight

    with pytest.raises(WorkloadError, match=match) as info:
        preflight(trainer_config("lightning", builder))
    assert "\n" not in str(info.value)


def test_scale_lr_keeps_group_and_scheduler_ratios() -> None:
    from tune_batch.trial.trainers.common import scale_lr

    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt = torch.optim.SGD([{"params": a.parameters(), "lr": 0.1}, {"params": b.parameters(), "lr": 0.01}])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
    assert scale_lr([opt], [sched], 0.4) == pytest.approx(4.0)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.2, 0.02])  # the scheduler's 0.5 kept
    assert sched.base_lrs == pytest.approx([0.4, 0.04])
    opt.step()
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.2, 0.02])


def test_importing_the_trainer_package_loads_no_trainer() -> None:
    import subprocess
    import sys

    code = ("import sys, tune_batch.trial.trainers, tune_batch.trial.trainers.common, tune_batch.export; "
            "print(sorted(m for m in ('lightning', 'transformers', 'keras') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


# ---------------------------------------------------------------- Lightning


@pytest.mark.slow
def test_lightning_trial_measures_the_users_trainer() -> None:
    need("lightning")
    r = run(trainer_config("lightning", "lightning_cnn", {"base_lr": 0.01}), batch_size=32, lr=0.05)
    assert_measured(r, "lightning", "val_acc")
    assert 0 <= r.metrics.val_acc <= 1 and r.info.chance_acc is not None
    assert r.info.train_samples_done == 256 and r.info.per_worker_batch == 32
    assert r.info.other["lr_factor"] == pytest.approx(5.0)  # the module's 0.01 made the searched 0.05


@pytest.mark.slow
def test_lightning_lr_reaches_the_optimizer_and_its_scheduler() -> None:
    need("lightning")
    from tests import trainer_builders

    trainer_builders.SEEN_LRS.clear()
    r = run(trainer_config("lightning", "lightning_cnn", {"base_lr": 0.02, "scheduler": True}), batch_size=32, lr=0.08)
    assert r.status is Status.OK, r.reason
    assert len(trainer_builders.SEEN_LRS) == 8
    assert all(lr == pytest.approx(0.08) for lr in trainer_builders.SEEN_LRS)


@pytest.mark.slow
@pytest.mark.parametrize("loop, builder, kwargs", [
    ("lightning", "lightning_cnn", {}),
    ("transformers", "hf_tiny", {"gpt2": True}),
])
def test_a_batch_over_the_memory_cap_ends_oom_inside_the_trainer(loop: str, builder: str,
                                                                 kwargs: dict[str, Any]) -> None:
    need(loop)
    cfg = trainer_config(loop, builder, kwargs, resources={"device_memory": "1MiB"},
                         objectives=[{"metric": "samples_per_s"}])
    r = run(cfg, batch_size=64)
    assert r.status is Status.OOM, (r.status, r.reason, r.traceback)
    assert "exceeds the cap of 1.0 MiB" in (r.reason or "") and r.info.loop == loop


@pytest.mark.slow
@pytest.mark.parametrize("loop, builder", [("lightning", "lightning_cnn"), ("transformers", "hf_tiny")])
def test_the_allocators_out_of_memory_inside_the_trainer_is_oom(loop: str, builder: str) -> None:
    need(loop)
    cfg = trainer_config(loop, builder, {"limit": 32}, objectives=[{"metric": "samples_per_s"}])
    r = run(cfg, batch_size=64)
    assert r.status is Status.OOM and "OutOfMemoryError" in (r.reason or ""), (r.reason, r.traceback)
    assert run(cfg, batch_size=16).status is Status.OK


# ---------------------------------------------------------------- Transformers


@pytest.mark.slow
def test_transformers_trial_measures_the_users_trainer_with_its_eval_loss() -> None:
    need("transformers")
    cfg = trainer_config("transformers", "hf_tiny", {"gpt2": True},
                         objectives=[{"metric": "samples_per_s"}, {"metric": "eval_loss", "direction": "minimize"}])
    r = run(cfg, batch_size=32, lr=1e-3)
    assert_measured(r, "transformers", "eval_loss")
    assert "eval_runtime" not in r.metrics.other
    assert r.info.train_samples_done == 256


@pytest.mark.slow
def test_transformers_accumulation_keeps_the_searched_batch_global() -> None:
    need("transformers")
    cfg = trainer_config("transformers", "hf_tiny", {"accumulation": 2},
                         objectives=[{"metric": "samples_per_s"}, {"metric": "eval_loss", "direction": "minimize"}])
    r = run(cfg, batch_size=32, lr=1e-3)
    assert r.status is Status.OK, r.reason
    assert (r.info.accumulation_steps, r.info.micro_batch_size, r.info.steps) == (2, 16, 8)
    assert r.info.train_samples_done == 256


@pytest.mark.slow
def test_an_objective_the_trainer_does_not_log_fails_the_trial_with_what_it_logged() -> None:
    need("transformers")
    cfg = trainer_config("transformers", "hf_tiny", objectives=[{"metric": "eval_accuracy"}])
    r = run(cfg)
    assert r.status is Status.FAILED
    assert "objective 'eval_accuracy' is not among what the trainer's evaluation logged (eval_loss)" in r.reason


# ---------------------------------------------------------------- Keras


@pytest.mark.slow
def test_keras_trial_measures_fit() -> None:
    need("keras")
    r = run(trainer_config("keras", "keras_dense"), batch_size=64, lr=0.05)
    assert_measured(r, "keras", "val_acc")
    assert "val_loss" in r.metrics.other
    # fit keeps the short last batch of each epoch: the samples are counted as they ran
    assert r.info.steps == 4 and r.info.train_samples_done <= 256


# ---------------------------------------------------------------- confirmation at length


@pytest.mark.slow
@pytest.mark.parametrize("loop, builder, metric", [
    ("lightning", "lightning_cnn", "val_acc"), ("transformers", "hf_tiny", "eval_loss"),
    ("keras", "keras_dense", "val_acc"),
])
def test_confirmation_runs_in_the_trainer_with_its_own_evaluation(loop: str, builder: str, metric: str) -> None:
    need(loop)
    from tune_batch.trial.curve import confirm_run

    objectives = [{"metric": "samples_per_s"}, {"metric": metric, "direction": "minimize" if "loss" in metric else
                                                "maximize"}]
    cfg = trainer_config(loop, builder, objectives=objectives,
                         confirm={"candidates": 1, "train_samples": 640, "evaluations": 4, "seeds": 1})
    assert cfg.confirm_metric[0] == metric
    r = confirm_run(cfg, {"batch_size": 32, "lr": 0.01}, trial_id="0c0", confirm_of=0)
    assert r.status is Status.OK, (r.reason, r.traceback)
    assert (r.info.loop, r.info.confirm_of, r.kind) == (loop, 0, "confirm")
    curve = r.info.curve
    assert [p[0] for p in curve] == [160.0, 320.0, 480.0, 640.0]  # every 5 of the 20 steps, the last at the end
    assert all(b[1] > a[1] for a, b in zip(curve, curve[1:]))  # training seconds grow, evaluations left out
    assert r.metrics.value(metric) == curve[-1][2] and r.metrics.samples_per_s == pytest.approx(640 / curve[-1][1])
    # its memory, watched as in tune_batch's loop: the run's peak, and what it keeps at each evaluation
    assert r.metrics.peak_mem_bytes > 0 and r.info.peak_mem_method
    assert [k[0] for k in r.info.memory_kept_bytes] == [5.0, 10.0, 15.0, 20.0]
    assert r.info.memory_growth is not None and r.info.memory_growth["flagged"] is False


@pytest.mark.parametrize("loop, builder, metric, train_size", [
    ("lightning", "lightning_cnn", "val_acc", 1497), ("transformers", "hf_tiny", "eval_loss", 512),
    ("keras", "keras_dense", "val_acc", 1497),
])
def test_a_confirmation_run_in_epochs_is_passes_over_the_builders_training_set(loop: str, builder: str, metric: str,
                                                                               train_size: int) -> None:
    """confirm.epochs in a trainer loop (refused before: the length depends on the builder's data):
    the run trains that many passes over the training set the builder returned."""
    need(loop)
    from tune_batch.trial.curve import confirm_run

    objectives = [{"metric": "samples_per_s"}, {"metric": metric, "direction": "minimize" if "loss" in metric else
                                                "maximize"}]
    epochs = 0.5 if train_size > 1000 else 0.7  # 23 or 11 steps: the last evaluation comes after the last step
    cfg = trainer_config(loop, builder, objectives=objectives,
                         confirm={"candidates": 1, "epochs": epochs, "evaluations": 2, "seeds": 1})
    r = confirm_run(cfg, {"batch_size": 32, "lr": 0.01}, trial_id="0c0", confirm_of=0)
    assert r.status is Status.OK, (r.reason, r.traceback)
    steps = math.ceil(epochs * train_size) // 32  # whole batches of the run's samples
    assert r.info.planned_samples == steps * 32 == r.info.train_samples_done and r.info.steps == steps
    assert [p[0] for p in r.info.curve] == [math.ceil(steps / 2) * 32.0, steps * 32.0]


@pytest.mark.slow
@pytest.mark.parametrize("loop, builder, metric", [
    ("lightning", "lightning_cnn", "val_acc"), ("transformers", "hf_tiny", "eval_loss"),
    ("keras", "keras_dense", "val_acc"),
])
def test_a_confirmation_run_in_the_trainer_ends_at_a_given_target_when_asked(loop: str, builder: str,
                                                                            metric: str) -> None:
    """confirm.stop_at_target in a trainer loop: the trainer is told to stop at its first
    evaluation at the target (it trained the whole length before, and validate said so)."""
    need(loop)
    from tune_batch.config.advice import config_notes
    from tune_batch.trial.curve import confirm_run

    loss = "loss" in metric
    objectives = [{"metric": "samples_per_s"}, {"metric": metric, "direction": "minimize" if loss else "maximize"}]
    # a target every evaluation reaches: the run ends at its first of 4 (after 5 of its 20 steps)
    cfg = trainer_config(loop, builder, objectives=objectives,
                         confirm={"candidates": 1, "train_samples": 640, "evaluations": 4, "seeds": 1,
                                  "target": 1e6 if loss else 0.01, "stop_at_target": True})
    assert not any("stop_at_target" in n for n in config_notes(cfg))
    r = confirm_run(cfg, {"batch_size": 32, "lr": 0.01}, trial_id="0c0", confirm_of=0)
    assert r.status is Status.OK, (r.reason, r.traceback)
    assert [p[0] for p in r.info.curve] == [160.0] and r.info.steps == 5
    assert r.info.stopped_at_target and r.info.planned_samples == 640 and r.info.train_samples_done == 160
    assert r.metrics.samples_per_s == pytest.approx(160 / r.info.curve[0][1])
    assert r.metrics.peak_mem_bytes > 0


@pytest.mark.slow
def test_a_search_in_lightning_confirms_its_candidates_there(tmp_path: Path) -> None:
    need("lightning")
    from tune_batch.pipeline.search import search

    cfg = trainer_config("lightning", "lightning_cnn", search={"backend": "optuna"},
                         confirm={"candidates": 1, "train_samples": 512, "evaluations": 2, "seeds": 1})
    result = search(cfg, tmp_path / "run", quiet=True)
    records = [*result.records, *result.report.confirm_runs]
    assert all(r.info.loop == "lightning" for r in records)
    assert any(r.kind == "confirm" and r.info.curve for r in records)
    assert result.report.confirmation is not None


# ---------------------------------------------------------------- the answer back in the trainer


def _run_dir(tmp_path: Path, loop: str = "transformers", accumulation: int = 2) -> Path:
    from tune_batch.store.rundir import RunDir

    cfg = trainer_config(loop, "hf_tiny", objectives=[{"metric": "samples_per_s"},
                                                      {"metric": "eval_loss", "direction": "minimize"}])
    out = RunDir(tmp_path / "run")
    out.prepare(cfg)
    for i, (b, lr, sps, loss) in enumerate([(32, 1e-3, 900.0, 2.1), (64, 3e-3, 1500.0, 2.4), (16, 5e-4, 500.0, 2.0)]):
        out.append(TrialResult(i, Params(b, lr), Status.OK, None,
                               Metrics(samples_per_s=sps, other={"eval_loss": loss}), 1.0,
                               TrialInfo(loop=loop, accumulation_steps=accumulation)))
    return out.path


def test_export_to_transformers_feeds_training_arguments(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from tune_batch.export import recommended, to_transformers

    run_dir = _run_dir(tmp_path)
    kwargs = to_transformers(run_dir)
    rec = recommended(run_dir)
    assert kwargs == {"per_device_train_batch_size": rec.batch_size // 2, "learning_rate": rec.lr,
                      "gradient_accumulation_steps": 2}
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), **kwargs)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == rec.batch_size
    assert args.learning_rate == rec.lr


def test_export_command_prints_each_trainers_terms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tune_batch.cli import main

    run_dir = str(_run_dir(tmp_path, accumulation=1))
    assert main(["export", run_dir, "--to", "transformers"]) == 0
    text = capsys.readouterr().out
    assert "# measured in: transformers (the user's own trainer)" in text and "TrainingArguments(" in text
    assert "gradient_accumulation_steps" not in text
    assert main(["export", run_dir, "--to", "transformers", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"per_device_train_batch_size", "learning_rate"}
    assert main(["export", run_dir, "--to", "lightning"]) == 0
    text = capsys.readouterr().out
    assert "not measured in lightning's loop" in text and "DataLoader(dataset, batch_size=" in text
    assert main(["export", run_dir, "--to", "keras", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"fit", "optimizer"}
    assert main(["export", str(tmp_path / "nowhere"), "--to", "keras"]) == 2


def test_best_yaml_says_which_trainer_it_was_measured_in(tmp_path: Path) -> None:
    from tune_batch.cli import main

    run_dir = _run_dir(tmp_path)
    assert main(["report", str(run_dir)]) == 0
    assert "# measured in: transformers (the user's own trainer" in (run_dir / "best.yaml").read_text()


def _two_ranks(fn: Any, out: Path) -> None:
    """``fn(rank, port, out)`` in two spawned processes (a gloo group's ranks 0 and 1 meet at port)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(fn, args=(port, str(out)), nprocs=2, start_method="spawn")


def _rank_scores(rank: int, port: int, out: str) -> None:
    """One rank of a 2-process gloo group: its shard's scores, combined as a Lightning group's are."""
    import torch.distributed as dist

    from tune_batch.trial.trainers.lightning import _across

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # rank 0's shard read 0.5, rank 1's 0.75; a synced metric (sync_dist) reads the same on both
        got = _across({"val_acc": 0.5 + 0.25 * rank, "val_loss_synced": 1.25}, 2)
        Path(out, f"{rank}.json").write_text(json.dumps(got))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_lightning_groups_evaluation_is_the_ranks_mean(tmp_path: Path) -> None:
    """Each rank of a Lightning worker group validates its own shard and logs its own value (unless
    the module syncs it): the record's evaluation is the ranks' mean, the same on every rank (a
    confirmation run's stop test reads it on each). Two real processes in a gloo group."""
    need("lightning")
    _two_ranks(_rank_scores, tmp_path)
    got = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    assert got[0] == got[1] == {"val_acc": pytest.approx(0.625), "val_loss_synced": pytest.approx(1.25)}


def _transformers_rank(rank: int, port: int, out: str) -> None:
    """One rank of a 2-process gloo group, set up as a search's worker group sets its ranks up
    (torchrun's variables, then the process group joined), training in the Transformers Trainer."""
    import os

    import torch.distributed as dist

    from tune_batch.backends.ray.group import assign_ranks
    from tune_batch.trial.trainers import measure_trainer

    os.environ.update(assign_ranks([("n", []), ("n", [])])[rank].env("127.0.0.1", port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        cfg = trainer_config("transformers", "hf_tiny_seen", {"out": out}, space={"num_gpus": [2]},
                             objectives=[{"metric": "samples_per_s"}, {"metric": "eval_loss", "direction": "minimize"}])
        r = measure_trainer(cfg, Params.of({"batch_size": 32, "lr": 0.01, "num_gpus": 2}), world=2)
        Path(out, f"record{rank}.json").write_text(json.dumps(r.to_record()))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_transformers_trainer_trains_one_model_on_a_worker_groups_shards(tmp_path: Path) -> None:
    """The user's Trainer as one rank of a worker group (num_gpus 2): its DDP on the group's
    process group, each rank 16 of each step's 32 samples from its own shard, one model at the end
    (the ranks' parameters the same after different data), the group's samples in the record and
    the evaluation over the whole evaluation set on every rank (before: a worker group was refused
    for this loop; and with the training's drop-last an evaluation batch of 64 over 64 samples on
    two ranks evaluated nothing). Two real processes, no Ray."""
    need("transformers")
    _two_ranks(_transformers_rank, tmp_path)
    seen = [json.loads((tmp_path / f"seen{r}.json").read_text()) for r in (0, 1)]
    assert seen[0]["first_batch"] != seen[1]["first_batch"]  # each rank its own shard
    assert all(len(s["first_batch"]) == 16 for s in seen)  # batch_size / world
    assert seen[0]["params_sum"] == pytest.approx(seen[1]["params_sum"], rel=1e-6)  # one model: DDP's all-reduce
    assert seen[0]["eval_samples"] == seen[1]["eval_samples"] == 64  # the whole evaluation set
    rec = json.loads((tmp_path / "record0.json").read_text())
    other = json.loads((tmp_path / "record1.json").read_text())
    assert rec["status"] == "ok", rec["reason"]
    info = rec["info"]
    assert info["world_size"] == 2 and info["per_worker_batch"] == 16 and info["micro_batch_size"] == 16
    assert info["train_samples_done"] == 256  # the group's: budget.train_samples
    assert info["timed_samples"] == info["timed_steps"] * 32
    assert rec["metrics"]["eval_loss"] == pytest.approx(other["metrics"]["eval_loss"])  # gathered: the same on both
    assert math.isfinite(rec["metrics"]["eval_loss"]) and rec["metrics"]["peak_mem_bytes"] > 0
