"""The command line as a user meets it: exit codes, one-line errors, nothing written on mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, sigint_default, sigint_ignored
from tune_batch.cli import main

QUICK = str(REPO / "configs/quickstart.yaml")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "budget.trials=3")
    assert code == 0 and "valid" in out and "3 trials" in out and "note:" not in out
    # a confirmation shorter than a trial is valid but not what its user means: said
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "confirm.train_samples=1024")
    assert code == 0 and ("note: confirm.train_samples = 1024 is shorter than one trial (budget.train_samples = "
                          "4096): the confirmation runs see less training than the search's trials did") in out
    # stopping confirmation runs at a target that is not given does nothing: said; given, not
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "confirm.stop_at_target=true")
    assert code == 0 and "note: confirm.stop_at_target = true does nothing here: no target is given" in out
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "confirm.stop_at_target=true", "--set",
                        "confirm.target=0.9")
    assert code == 0 and "stop_at_target" not in out
    # a loss target no run can reach (a loss is not negative; a perplexity not below 1): said, not refused
    lm = str(REPO / "configs" / "tiny_lm.yaml")
    code, out, _ = _run(capsys, "validate", lm, "--set", "goal.target=-1")
    assert code == 0 and ("note: goal.target = -1 is below 0, which val_loss (a loss) never goes under: no run "
                          "reaches it, so each confirmation run trains its whole length and nothing is recommended "
                          "on time to target") in out, out
    code, out, _ = _run(capsys, "validate", lm, "--set", "confirm.target=0.5", "--set",
                        "objectives=[{metric: samples_per_s}, {metric: val_perplexity, direction: minimize}]")
    assert code == 0 and "confirm.target = 0.5 is below 1, which val_perplexity (a perplexity) never goes under" in out
    code, out, _ = _run(capsys, "validate", lm, "--set", "goal.target=1.2")
    assert code == 0 and "never goes under" not in out
    # a user's evaluation that cannot score the 2 samples preflight gives it is not refused for that
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "train.evaluate=tests.workloads:eval_needs_eight", "--set",
                        "objectives=[{metric: samples_per_s, direction: maximize}, {metric: val_loss, direction: "
                        "minimize}]")
    assert code == 0 and "valid" in out
    # nor a step that needs more than 2 samples: it is given a trial's fewest (16 here)
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "train.step=tests.workloads:step_needs_eight")
    assert code == 0 and "valid" in out
    # where the trials run elsewhere (a cluster here; a GPU machine alike), a model that fails on this
    # CPU is said, not refused: it may need the GPU (a CUDA-only kernel)
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "data.resize=2", "--set", "search.address=10.0.0.1:6379")
    assert code == 0 and "note: the model cannot take a batch of the data (RuntimeError" in out
    assert "(on this machine's CPU; the trials run on the cluster at search.address, where it may work: not " in out
    # half precision on a CPU: measured as asked, and said to be slow there
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "train.precision=bf16")
    import torch

    assert code == 0 and ("note: train.precision = bf16 on this machine's CPU: its autocast is slow there" in out) is (
        not torch.cuda.is_available())
    # trials too short for the largest batches: said before they are skipped
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "budget.train_samples=64")
    assert code == 0 and ("note: budget.train_samples = 64 gives fewer than 2 steps at batch_size 64, 128, 256: "
                          "their trials are skipped unmeasured; budget.train_samples = 512 measures them") in out
    # one fixed learning rate: a finite space, smaller than the budget
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "space.lr={low: 0.01, high: 0.01}", "--set",
                        "space.batch_size=[16, 32]", "--set", "budget.trials=5")
    assert code == 0 and ("note: budget.trials = 5 but the space holds 2 configuration(s) (space.lr is fixed at "
                          "0.01): each is measured once") in out
    # trials that cannot train their samples in their time limit on this CPU (the GPU config on a laptop:
    # every trial would time out, and timeouts do not stop a search): said from a timed forward pass
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "budget.trial_timeout_s=0.01")
    assert code == 0 and ("note: a trial may not finish on this machine's CPU" in out) is (
        not torch.cuda.is_available())
    assert "past budget.trial_timeout_s = 0.01; lower budget.train_samples" in out or torch.cuda.is_available()
    # and what a search here says of this machine's resources before its first trial
    few = torch.cuda.device_count() or os.cpu_count()
    code, out, _ = _run(capsys, "validate", QUICK, "--set", f"space.num_gpus=[1, {few * 2}]", "--set",
                        "objectives=[{metric: samples_per_s}, {metric: device_util}, {metric: val_acc}]")
    assert code == 0 and f"note: space.num_gpus: [{few * 2}] dropped" in out
    assert ("note: objectives: device_util on a CPU measures the machine" in out) is (not torch.cuda.is_available())
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "search.backend=optuna", "--set", "space.num_gpus=[1, 2]")
    assert code == 0 and "note: space.num_gpus: choices > 1 dropped: search.backend 'optuna' runs one-worker" in out


@pytest.mark.parametrize(("argv", "words"), [
    (["validate", QUICK, "--set", "space.lr.low=-1"], ["space.lr.low = -1"]),
    (["validate", QUICK, "--set", "budget.trails=3"], ["did you mean 'trials'"]),
    (["validate", "missing.yaml"], ["does not exist"]),
    (["search", QUICK, "--set", "model.name=resnet81"], ["model.name = 'resnet81'", "did you mean 'resnet18'"]),
    (["search", QUICK, "--set", "model.name=nosuch.mod:fn"], ["does not import"]),
    (["search", QUICK, "--set", "data.name=cifar10", "--set", "data.root=/nonexistent"], ["lacks data_batch_1"]),
    (["search", QUICK, "--set", "search.backend=optuna", "--address", "auto"], ["needs search.backend = 'ray'"]),
    # what search's preflight rejects, validate rejects too
    (["validate", QUICK, "--set", "model.name=resnet_nope"], ["model.name = 'resnet_nope'", "did you mean"]),
    (["validate", QUICK, "--set", "model.kwargs.bogus=1"], ["model.name = 'small_cnn'", "building it failed",
                                                              "bogus"]),
    (["search", QUICK, "--set", "model.name=tests.workloads:builder_raises"], ["building it failed",
                                                                                "could not find its weights file"]),
    (["search", QUICK, "--set", "data.resize=100000"], ["data.resize = 100000", "less than or equal to 4096"]),
    # a model that cannot take the data fails before Ray starts, not in every trial
    (["search", QUICK, "--set", "data.resize=2"], ["the model cannot take a batch of the data",
                                                   "Output size is too small", "data.resize"]),
    (["validate", QUICK, "--set", "train.step=tests.workloads:per_sample_loss"], ["the loss is (2,), not one number",
                                                                                 "train.step must return"]),
    # the user's evaluation, on 2 validation samples: an objective it does not return (every trial
    # was measured and left off the front for it, the whole budget spent), or no dict at all
    (["search", QUICK, "--set", "train.evaluate=tests.workloads:eval_accuracy_only", "--set",
      "objectives=[{metric: samples_per_s, direction: maximize}, {metric: val_top1, direction: maximize}]"],
     ["objective 'val_top1' is not among what train.evaluate = 'tests.workloads:eval_accuracy_only' returned "
      "(accuracy); return it there or name one of those in objectives"]),
    (["validate", QUICK, "--set", "train.evaluate=tests.workloads:eval_not_a_dict", "--set",
      "objectives=[{metric: samples_per_s, direction: maximize}, {metric: val_loss, direction: minimize}]"],
     ["returned list, not a dict"]),
    # batches of dicts: the built-in loss, then the built-in evaluation, say what they take
    (["validate", QUICK, "--set", "data.name=tests.workloads:dict_batches"],
     ["the built-in loss takes (inputs, labels) batches and this data's are a dict of x, y", "give train.step"]),
    (["validate", QUICK, "--set", "data.name=tests.workloads:dict_batches", "--set",
      "train.step=tests.workloads:dict_step"], ["the built-in evaluation (val_acc) takes (inputs, labels) batches",
                                                "give train.evaluate"]),
    (["search", QUICK, "--storage", "notaurl"], ["--storage 'notaurl'", "sqlite:///"]),
    (["search", QUICK, "--set", "space.num_gpus=[4096]", "--set", "space.batch_size.max=65536"],
     ["space.num_gpus = [4096]", "include 1"]),
    (["probe", QUICK, "--batch-size", "16", "--lr", "nan"], ["a finite lr > 0"]),
    (["probe", QUICK, "--batch-size", "5000", "--lr", "0.01"], ["batch size 5000 is larger than the training set"]),
    # too few samples for a warm-up step and a timed one: the message shows its arithmetic (it said
    # "the smallest batch_size (64)" of a probe at batch 32)
    (["probe", QUICK, "--batch-size", "32", "--lr", "0.01", "--set", "budget.train_samples=8"],
     ["budget.train_samples = 8", "2 x --batch-size 32 (2 x 32 = 64"]),
    (["validate", QUICK, "--set", "budget.train_samples=8"], ["2 x the smallest batch_size (2 x 16 = 32"]),
])
def test_user_mistakes_are_one_line_exit_2_nothing_written(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           argv: list[str], words: list[str]) -> None:
    out_dir = tmp_path / "out"
    if argv[0] in ("search", "probe"):
        argv = [*argv, "--output", str(out_dir)]
    code, _, err = _run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tune-batch: error: ")
    for w in words:
        assert w in lines[0]
    assert "Traceback" not in err
    assert not out_dir.exists()


def test_unwritable_output_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = _run(capsys, "search", QUICK, "--output", str(blocker / "run"))
    assert code == 2 and "is a file, not a directory" in err


def test_unknown_flag_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["search", QUICK, "--frobnicate"])
    assert info.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--debug", "validate", QUICK, "--set", "space.lr.low=-1")
    assert code == 2 and "Traceback" in err


def test_report_needs_a_run_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, "report", str(tmp_path))
    assert code == 2 and "no config.yaml" in err


@pytest.mark.slow
def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "tune_batch", "validate", QUICK], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path, timeout=120)
    assert p.returncode == 0 and "valid" in p.stdout


@pytest.mark.slow
def test_loading_a_config_does_not_import_torch_or_ray() -> None:
    # the library's config validation stays light; `tune-batch validate` also builds the
    # workload (the checks search makes before writing anything), which needs torch, never Ray
    code = (f"import sys; from tune_batch.config import load_config; load_config({QUICK!r}); "
            "print('torch' in sys.modules, 'ray' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert p.stdout.strip().splitlines()[-1] == "False False"
    # validate builds the workload and reads the resource plan (its notes of dropped GPU counts) without Ray
    code = (f"import sys; from tune_batch.cli import main; main(['validate', {QUICK!r}, '--set', "
            f"'space.num_gpus=[1, 128]', '--set', 'space.min_batch_per_gpu=1']); print('ray' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert "note: space.num_gpus: [128] dropped" in p.stdout and p.stdout.strip().splitlines()[-1] == "False", p.stdout


def test_version() -> None:
    from importlib.metadata import version

    from tune_batch import __version__

    assert version("tune-batch") == __version__  # the distribution's and the package's agree
    p = subprocess.run([sys.executable, "-m", "tune_batch", "--version"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"tune-batch {__version__}"


def test_the_bad_config_corpus_through_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every malformed config of test_config.BAD, as a user meets it: exit 2, one line naming
    the field, no traceback, nothing written to --output."""
    import yaml

    from tests.test_config import BAD

    for i, (raw, words) in enumerate(BAD):
        cfg_path = tmp_path / f"bad{i}.yaml"
        cfg_path.write_text(yaml.safe_dump(raw))
        out = tmp_path / f"out{i}"
        code, _, err = _run(capsys, "search", str(cfg_path), "--output", str(out))
        assert code == 2, (raw, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert words[0] in err, (words[0], err)
        assert not out.exists()


def test_more_mistakes_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    bomb = tmp_path / "bomb.yaml"
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}" + f", *{chr(97 + i)}" * 8 + "]" for i in range(8)]
    bomb.write_text("data:\n  kwargs:\n" + "".join(f"    {line}\n" for line in levels))
    bad_run = tmp_path / "badrun"
    bad_run.mkdir()
    (bad_run / "config.yaml").write_text("model: [unclosed")
    cases = [
        (["validate", str(empty)], "the file is empty; start from configs/quickstart.yaml"),
        (["search", str(empty)], "the file is empty"),
        (["validate", str(bomb)], "aliases are expanded"),
        (["search", QUICK, "--output", ""], "give a directory for the run"),
        (["search", QUICK, "--output", "/proc/tune-batch-x"], "cannot be created or written"),
        (["report", str(bad_run)], "cannot be read"),
    ]
    for argv, words in cases:
        code, _, err = _run(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, (argv, err)
        assert "Traceback" not in err
    assert not Path("runs").exists() or not any(Path("runs").iterdir())


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_address_nothing_answers_at_is_refused_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          address: str) -> None:
    import time

    t0 = time.monotonic()
    code, _, err = _run(capsys, "search", QUICK, "--address", address, "--output", str(tmp_path / "out"))
    assert code == 2 and "nothing answers at 127.0.0.1:1" in err and len(err.strip().splitlines()) == 1
    assert time.monotonic() - t0 < 60 and not (tmp_path / "out").exists()


def test_a_lost_study_is_rebuilt_and_an_unappendable_record_file_refused(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:
    import yaml

    from tests.conftest import tiny_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(search={"backend": "optuna"},
                                              budget={"trials": 1, "train_samples": 128}).to_dict()))
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, "search", str(cfg), "--output", str(out), "--quiet")
    assert code == 0, err
    # --quiet keeps the final table (its help says so), not the progress lines
    assert "1 trials, ok 1" in stdout and "[1/1]" not in stdout, stdout
    (out / "study.db").unlink()
    code, stdout, err = _run(capsys, "search", str(cfg), "--output", str(out), "--set", "budget.trials=2")
    assert code == 0, err
    assert "rebuilt from" in stdout and "(1 trial(s))" in stdout
    ids = [json.loads(x)["trial_id"] for x in (out / "trials.jsonl").read_text().splitlines()]
    assert ids == [0, 1]  # the new trial goes on after the old one: nothing hidden, nothing lost
    import optuna

    study = optuna.load_study(study_name="t", storage=f"sqlite:///{out / 'study.db'}")
    assert [t.number for t in study.trials] == [0, 1] and study.trials[0].user_attrs["rebuilt_from"] == "trials.jsonl"
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text((out / "config.yaml").read_text())
    (other / "trials.jsonl").mkdir()  # cannot be appended to
    code, _, err = _run(capsys, "search", str(cfg), "--output", str(other))
    assert code == 2 and "cannot be appended to" in err and len(err.strip().splitlines()) == 1


def test_probe_flags_what_it_cannot_vouch_for(tmp_path: Path) -> None:
    from tune_batch.output.probe import _overhead
    from tune_batch.output.probe import _trace_flag as trace_flag
    from tune_batch.pipeline.probe import trace_steps
    from tune_batch.store.records import Metrics, Params, Status, TrialInfo, TrialResult

    def _trace_flag(r: TrialResult) -> list[str]:  # the steps the trace files hold, as the probe reads them
        return trace_flag(r, trace_steps(r.info.trace_dir))

    def rec(over: float, trace_dir: Path) -> TrialResult:
        return TrialResult("probe", Params(64, 0.04, 1), Status.OK, None,
                           Metrics(samples_per_s=1000.0, samples_per_s_ci=30.0), 1.0,
                           TrialInfo(profiler_overhead=over, trace_dir=str(trace_dir), profile_active_steps=3))

    assert "UNVERIFIED, negative" in _overhead(rec(-0.02, tmp_path))
    assert "UNVERIFIED, inside the window's own noise (+-3.0%)" in _overhead(rec(0.02, tmp_path))
    assert "UNVERIFIED" not in _overhead(rec(0.30, tmp_path)) and "+30.0%" in _overhead(rec(0.30, tmp_path))
    assert "no readable trace" in _trace_flag(rec(0.3, tmp_path))[0]
    steps = {"traceEvents": [{"name": f"ProfilerStep#{i}"} for i in range(3)] + [{"name": "aten::mm"}]}
    (tmp_path / "a.pt.trace.json").write_text(json.dumps(steps))
    assert _trace_flag(rec(0.3, tmp_path)) == []  # this trial's trace alone
    (tmp_path / "b.pt.trace.json").write_text(json.dumps(steps))  # an earlier probe's, in the same directory
    (flag,) = _trace_flag(rec(0.3, tmp_path))
    assert "holds 6 profiled step(s), this trial recorded 3" in flag
    two = rec(0.3, tmp_path)  # a two-worker group: each worker profiles its 3 steps into the directory
    assert _trace_flag(two.replace(info=two.info.with_(world_size=2))) == []


def test_probe_is_a_library_call_that_returns_data(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import tune_batch
    from tests.conftest import tiny_config

    seen: list[str] = []
    done = tune_batch.probe(tiny_config(budget={"train_samples": 256}), 32, 0.05, output=tmp_path / "p", profile=False,
                            on_workload=seen.append)
    assert done.ok and done.result.trial_id == "probe" and done.result.params.batch_size == 32
    assert seen == [done.workload] and "small_cnn" in done.workload and done.trace_steps is None
    assert done.trials_path == tmp_path / "p" / "trials.jsonl" and len(done.trials_path.read_text().splitlines()) == 1
    assert "workload" not in capsys.readouterr().out  # the caller prints, or not
    with pytest.raises(tune_batch.UserError, match="a finite lr > 0"):
        tune_batch.probe(tiny_config(), 32, float("nan"), output=tmp_path / "q")
    with pytest.raises(tune_batch.UserError, match="--batch-size 30 does not split evenly over --num-gpus 4 workers"):
        tune_batch.probe(tiny_config(), 30, 0.05, 4, output=tmp_path / "q")
    many = 2 * (os.cpu_count() or 1)  # more workers than this machine has CPUs (no GPU here, or fewer than that)
    with pytest.raises(tune_batch.UserError, match=f"--num-gpus {many}: this machine has"):
        tune_batch.probe(tiny_config(), 32 * many, 0.05, many, output=tmp_path / "q")
    assert not (tmp_path / "q").exists()


def test_probe_profiles_unless_told_not_to_and_measuring_never_changes_training(capsys: pytest.CaptureFixture[str],
                                                                               tmp_path: Path) -> None:
    """A probe profiles whatever the config file says (the quickstart's says no), unless the
    command line sets profile.enabled; with the profiler on and the window extended, val_acc and
    the final loss are those of a probe with neither (measurement never touches training)."""
    import yaml

    from tests.conftest import tiny_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(profile={"enabled": False}, budget={"train_samples": 512}).to_dict()))
    args = [str(cfg), "--batch-size", "32", "--lr", "0.05"]
    code, out_a, err = _run(capsys, "probe", *args, "--set", "budget.min_window_s=1.0", "--output", str(tmp_path / "A"))
    assert code == 0, err
    code, out_b, err = _run(capsys, "probe", *args, "--set", "profile.enabled=false", "--set", "budget.min_window_s=0",
                            "--output", str(tmp_path / "B"))
    assert code == 0, err
    (a,), (b,) = ([json.loads(x) for x in (tmp_path / d / "trials.jsonl").read_text().splitlines()] for d in "AB")
    assert a["info"]["profile_step_s"] > 0 and a["info"]["window_extension_steps"] > 0 and "trace  " in out_a
    assert b["info"].get("profile_step_s") is None and not b["info"].get("window_extension_steps")
    assert "trace  " not in out_b
    assert a["metrics"]["val_acc"] == b["metrics"]["val_acc"] and a["info"]["final_loss"] == b["info"]["final_loss"]


def test_the_probe_report_shows_what_the_evaluation_returned() -> None:
    """A val_loss config's probe printed "val_acc nan" and nothing of its loss."""
    from tune_batch.output.probe import render_probe
    from tune_batch.store.records import TrialResult

    def rec(metrics: dict) -> TrialResult:
        base = {"samples_per_s": 3118.5, "mfu": 0.19, "timed_s": 1.28, "data_wait_frac": 0.03}
        return TrialResult.from_record({"trial_id": "probe", "params": {"batch_size": 32, "lr": 0.003, "num_gpus": 1},
                                        "status": "ok", "metrics": {**base, **metrics},
                                        "info": {"device": "cpu (2 threads)", "bottleneck": "compute-bound"}})

    lm = render_probe(rec({"val_loss": 1.3617, "val_perplexity": 3.903}))
    assert "val_loss          1.362" in lm and "val_perplexity    3.903" in lm and "val_acc" not in lm
    assert "val_acc           0.9500" in render_probe(rec({"val_acc": 0.95}))
    assert "val_acc           nan" in render_probe(rec({}))  # nothing validated: said, not hidden


def test_a_baseline_with_confirmation_off_is_said_not_to_be_compared(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    """The shipped configs name a baseline; with confirm.candidates = 0 it was dropped in silence."""
    import yaml

    from tests.conftest import tiny_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(search={"backend": "optuna"}, budget={"trials": 1, "train_samples": 128},
                                              baseline={"batch_size": 32, "lr": 0.01}).to_dict()))
    code, stdout, err = _run(capsys, "search", str(cfg), "--output", str(tmp_path / "out"))
    assert code == 0, err
    assert "baseline: not compared: it is confirmed beside the candidates, and confirmation is off " \
           "(confirm.candidates = 0)" in stdout + err
    code, out, _ = _run(capsys, "validate", QUICK, "--set", "confirm.candidates=0")  # said before a run too
    assert code == 0 and "note: baseline: not compared" in out
    assert "note:" not in _run(capsys, "validate", QUICK)[1]


def test_a_probe_on_a_worker_group_refuses_an_address_nothing_answers_at(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """probe --num-gpus 2 with search.address where no Ray runs waited 13 minutes for Ray's own
    retries, then failed; a search refuses such an address in 5 s before anything is written."""
    import socket
    import time

    with socket.socket() as s:  # a port bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    code = main(["probe", str(REPO / "configs/quickstart.yaml"), "--set", f"search.address=127.0.0.1:{port}",
                 "--batch-size", "32", "--lr", "0.05", "--num-gpus", "2", "--output", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - start < 30
    assert f"--address '127.0.0.1:{port}': nothing answers at 127.0.0.1:{port}" in err, err
    assert not (tmp_path / "p").exists()


def test_ray_address_in_the_environment_names_the_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """RAY_ADDRESS set (a cluster's jobs and pods have it): the search crashed in ray.init ("When
    connecting to an existing cluster, num_cpus and num_gpus must not be provided", a traceback).
    It names the cluster, as ray.init() reads it: checked, and refused in one line where nothing answers."""
    import socket

    from tests.conftest import tiny_config
    from tune_batch.backends.address import ray_address

    with socket.socket() as s:  # a port bound and closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    for argv in (["search", QUICK], ["probe", QUICK, "--batch-size", "32", "--lr", "0.05", "--num-gpus", "2"]):
        code = main([*argv, "--output", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 2 and f"RAY_ADDRESS '127.0.0.1:{port}': nothing answers at 127.0.0.1:{port}" in err, err
        assert "unset RAY_ADDRESS for a local instance" in err and not (tmp_path / "out").exists()
    # --address and search.address come first; the in-process backend runs no Ray
    assert ray_address(tiny_config(), "10.0.0.1:6379") == "10.0.0.1:6379"
    assert ray_address(tiny_config(search={"address": "auto"}), None) == "auto"
    assert ray_address(tiny_config(search={"backend": "optuna"}), None) is None


@pytest.mark.slow
def test_a_search_whose_stdout_reader_goes_away_finishes_and_keeps_everything(tmp_path: Path) -> None:
    """`search ... | head -1`: the next progress line raised BrokenPipeError in the middle of the
    search (a traceback, no trial recorded); now output is dropped, said once, and the search ends."""
    import yaml

    from tests.conftest import tiny_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(search={"backend": "optuna"}, budget={"trials": 2}).to_dict()))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tune_batch", "search", str(cfg), "--output", str(out)],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("workload: ")
    proc.stdout.close()  # the reader goes, as `head -1` does
    stderr = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, stderr[-2000:]
    assert "Traceback" not in stderr and stderr.count("tune-batch: stdout was closed (its reader ended)") == 1
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2 and (out / "pareto.json").exists()


@pytest.mark.slow
def test_a_probe_stopped_by_ctrl_c_leaves_no_directory_and_promises_nothing(tmp_path: Path) -> None:
    """Ctrl-C during a probe said "finished trials are kept in the run directory (run the same
    command again to continue)" and left a directory holding only config.yaml."""
    import signal

    import yaml

    from tests.conftest import tiny_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(budget={"train_samples": 65536}).to_dict()))
    out = tmp_path / "p"
    proc = subprocess.Popen([sys.executable, "-u", "-m", "tune_batch", "probe", str(cfg), "--batch-size", "32", "--lr",
                             "0.05", "--output", str(out)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    assert proc.stdout.readline().startswith("workload: ")  # the trial starts next: 65536 samples take a while
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.strip() == "tune-batch: interrupted; nothing was recorded" and not out.exists()


@pytest.mark.parametrize(("sig", "code", "name", "started"), [(2, 130, "", sigint_default),
                                                          (15, 143, " (SIGTERM)", sigint_default),
                                                          (15, 143, " (SIGTERM)", sigint_ignored)])
def test_a_search_stopped_by_ctrl_c_before_it_recorded_anything_leaves_nothing_and_says_so(
        tmp_path: Path, sig: int, code: int, name: str, started: object) -> None:
    """Ctrl-C while a search loaded its data said "finished trials are kept in the run directory
    (run the same command again to continue)": there was no run directory and no trial. SIGTERM
    there (a scheduler's stop) ended the process without a word (killed by the signal). And a
    search that a script started in the background (`cmd &`: SIGINT ignored) went on loading
    after a SIGTERM, which was turned into that ignored SIGINT."""
    import time

    out, loading = tmp_path / "s", tmp_path / "loading"
    proc = subprocess.Popen([sys.executable, "-u", "-m", "tune_batch", "search", QUICK, "--set",
                             "data.name=tests.workloads:slow_to_build", "--set", f"data.kwargs.started={loading}",
                             "--set", "search.backend=optuna", "--output", str(out)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=started)
    deadline = time.monotonic() + 120
    while not loading.exists():  # inside the 60 s data build
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.1)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, (proc.returncode, stderr[-2000:])
    assert stderr.strip() == f"tune-batch: interrupted{name}; nothing was recorded" and not out.exists()


def test_a_signal_a_background_search_was_started_to_ignore_stays_ignored() -> None:
    """A script's background job (`cmd &`) inherits SIGINT ignored, so that the Ctrl-C meant for
    the script leaves it running; `nohup` ignores SIGHUP, so that it outlives the terminal. The
    search's own handling took SIGINT over (a Ctrl-C at the script's terminal stopped it too);
    SIGTERM still stops it."""
    import signal

    from tune_batch.backends.signals import graceful, received

    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGHUP)}
    received["signal"] = None
    try:
        with graceful():
            assert all(signal.getsignal(s) is signal.SIG_IGN for s in before)
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGHUP)
            assert received["signal"] is None
            signal.raise_signal(signal.SIGTERM)
            assert received["signal"] == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        received["signal"] = None
