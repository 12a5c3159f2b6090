"""tune_batch inside a user's own Optuna study, the in-process optuna backend, and resuming."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml

import tune_batch
from tests.conftest import REPO, sigint_default, tiny_config
from tune_batch.errors import UserError
from tune_batch.optuna import Objective, suggest

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.slow
def test_objective_in_a_users_sqlite_study_with_extra_hyperparameter(tmp_path: Path) -> None:
    # README example: the user's study, sampler and storage; tune_batch measures
    cfg = tiny_config(model={"name": "tests.workloads:tiny_with_dropout", "kwargs": {"width": 8}},
                      budget={"train_samples": 512})
    storage = f"sqlite:///{tmp_path / 'mine.db'}"
    study = optuna.create_study(study_name="mine", storage=storage, directions=cfg.directions,
                                sampler=optuna.samplers.RandomSampler(seed=1))
    study.enqueue_trial({"batch_size": 32, "lr": 0.02, "num_gpus": 1, "dropout": 0.25})

    def extra_space(trial: optuna.Trial) -> dict:
        return {"dropout": trial.suggest_float("dropout", 0.0, 0.5)}

    study.optimize(Objective(cfg, extra_space=extra_space), n_trials=4)

    stored = optuna.load_study(study_name="mine", storage=storage).get_trials()
    assert len(stored) == 4
    first = stored[0]
    assert first.params == {"batch_size": 32, "lr": 0.02, "num_gpus": 1, "dropout": 0.25}  # enqueued ran first
    for t in stored:
        assert t.user_attrs["status"] in ("ok", "skipped", "oom", "failed")
        assert len(t.system_attrs["constraints"]) == 3  # memory, space, diverged: the list optuna-dashboard reads
        assert "dropout" in t.params
        if t.user_attrs["status"] == "ok":
            m = t.user_attrs["metrics"]
            assert set(m) >= {"samples_per_s", "device_util", "val_acc", "peak_mem_bytes"}
            assert t.values == [m["samples_per_s"], m["device_util"], m["val_acc"]]
            assert t.system_attrs["constraints"] == [0.0, 0.0, 0.0]


def test_a_config_mistake_every_trial_meets_stops_the_users_own_study() -> None:
    """In the user's study.optimize, a train.evaluate that returns no dict failed every trial
    alike; now the first one raises, Optuna marks it FAIL and the loop stops with the error."""
    from tune_batch.errors import TrialConfigError

    cfg = tiny_config(train={"evaluate": "tests.workloads:eval_not_a_dict"}, budget={"train_samples": 256},
                      objectives=[{"metric": "samples_per_s", "direction": "maximize"},
                                  {"metric": "val_loss", "direction": "minimize"}])
    study = optuna.create_study(directions=cfg.directions)
    with pytest.raises(TrialConfigError, match=r"not a dict .*\(trial 0; every trial would end the same way\)"):
        study.optimize(Objective(cfg), n_trials=4)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]


def test_a_users_study_whose_first_trials_all_fail_alike_stops() -> None:
    """A sample no trial can read failed every trial of the user's study.optimize alike; now the
    third such trial raises out of it, as a config mistake does."""
    from tune_batch.errors import TrialConfigError

    cfg = tiny_config(data={"name": "tests.workloads:one_unreadable_sample", "resize": None},
                      budget={"train_samples": 256})
    study = optuna.create_study(directions=cfg.directions)
    with pytest.raises(TrialConfigError, match=r"^the first 3 trials all failed alike \(OSError: cannot read sample 9"):
        study.optimize(Objective(cfg), n_trials=6)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 3


def test_a_study_with_other_directions_is_refused(tmp_path: Path) -> None:
    cfg = tiny_config()
    study = optuna.create_study(directions=["minimize", "maximize", "maximize"])
    with pytest.raises(UserError, match="has directions \\['minimize', 'maximize', 'maximize'\\]"):
        study.optimize(Objective(cfg), n_trials=1, catch=())


def test_an_objective_over_gpu_counts_it_cannot_run_is_refused_at_once() -> None:
    """Objective measures one worker in the caller's process: every num_gpus 2 trial would have
    failed ("use the ray backend"), one by one."""
    with pytest.raises(UserError, match=r"space.num_gpus = \[1, 2\]: Objective measures one worker in this process, "
                                        r"\[2\] would all fail; give \[1\], or run tune_batch.search"):
        Objective(tiny_config(space={"num_gpus": [1, 2]}))
    assert Objective(tiny_config(space={"num_gpus": [1, 2]}), runner=lambda *a, **k: None) is not None  # a replay


def test_suggest_on_a_users_trial() -> None:
    cfg = tiny_config(space={"num_gpus": [1, 2]})
    study = optuna.create_study(directions=["maximize"])
    trial = study.ask()
    p = suggest(trial, cfg.space)
    assert p["batch_size"] in (16, 32, 64) and p["num_gpus"] in (1, 2) and 0.01 <= p["lr"] <= 0.1


@pytest.mark.slow
def test_optuna_backend_search_and_the_optuna_cli(tmp_path: Path) -> None:
    cfg = tiny_config(search={"backend": "optuna", "seed": 2}, budget={"trials": 3, "train_samples": 512})
    out = tmp_path / "run"
    res = tune_batch.search(cfg, out, quiet=True)
    recs = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and [r["trial_id"] for r in recs] == [0, 1, 2]
    assert res.front and (out / "pareto.json").exists() and (out / "results.csv").exists()
    assert "ray" not in {p.name for p in out.iterdir()}
    p = subprocess.run(["optuna", "trials", "--storage", f"sqlite:///{out / 'study.db'}", "--study-name", "t",
                        "-f", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert len(rows) == 3 and all(r["state"] == "COMPLETE" for r in rows)


def test_run_trial_api(tiny) -> None:
    res = tune_batch.run_trial(tiny, {"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    assert res.status == "ok" and res.metrics.val_acc > 0.2


def _write_cfg(tmp_path: Path, backend: str, trials: int) -> Path:
    cfg = tiny_config(search={"backend": backend, "seed": 0}, budget={"trials": trials, "train_samples": 256})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["optuna", pytest.param("ray", marks=pytest.mark.ray)])
def test_sigkill_then_resume_loses_nothing_and_duplicates_nothing(tmp_path: Path, backend: str) -> None:
    trials = 3
    cfg_path = _write_cfg(tmp_path, backend, trials)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tune_batch", "search", str(cfg_path), "--output", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    jsonl = out / "trials.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if jsonl.exists() and len(jsonl.read_text().splitlines()) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(f"search ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert 2 <= len(before) < trials
    last_record = jsonl.stat().st_mtime

    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    # the killed invocation's seconds, from its start to its last record, still count in the cost
    lost = re.search(r"ended without adding its time \(killed\?\): (\d+) s", p.stdout)
    assert lost and 0 < int(lost.group(1)) <= last_record - t0 + 1, p.stdout[-2000:]
    wall = json.loads((out / "search_time.json").read_text())
    assert set(wall) == {"wall_s"} and wall["wall_s"] > int(lost.group(1))  # and the resume's own
    after = [json.loads(x) for x in jsonl.read_text().splitlines()]
    ids = [r["trial_id"] for r in after]
    assert len(after) == trials and len(set(ids)) == trials  # exactly budget.trials, no duplicate
    assert after[: len(before)] == before  # no finished trial lost or rewritten
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{out / 'study.db'}")
    states = [t.state for t in study.get_trials()]
    assert optuna.trial.TrialState.RUNNING not in states


def _search_until(tmp_path: Path, cfg, ready, timeout_s: float) -> tuple[subprocess.Popen, Path, list[str]]:
    """`tune-batch search` on ``cfg`` in a process of its own, returned once ``ready(lines of
    trials.jsonl)`` holds; with its output directory and command line."""
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tune_batch", "search", str(path), "--output", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    jsonl = out / "trials.jsonl"
    deadline = time.monotonic() + timeout_s
    while not (jsonl.exists() and ready(jsonl.read_text().splitlines())):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.1)
    return proc, out, cmd


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_search_cleanly_and_says_so(tmp_path: Path, sig: int, code: int) -> None:
    cfg = tiny_config(search={"backend": "optuna", "seed": 0}, budget={"trials": 5, "train_samples": 1024})
    proc, out, _ = _search_until(tmp_path, cfg, lambda lines: len(lines) >= 2, 120)
    jsonl = out / "trials.jsonl"
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr[-2000:]
    n = len(jsonl.read_text().splitlines())
    assert 2 <= n < 5
    assert f"interrupted after {n} of 5 trials" in stderr and "Traceback" not in stderr
    # said at the signal, not only at the end: the user knows the search is stopping, and how to stop it at once
    said = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert f"{said}: no new trial starts; the running ones finish and are recorded" in stderr, stderr[-2000:]
    assert "Pareto front" in stdout and (out / "pareto.json").exists()  # what finished is reported
    # the resume is the same after either signal and after SIGKILL, which leaves RUNNING trials
    # behind: tested above on both backends (and test_reliability's continued search)


@pytest.mark.slow
def test_a_search_whose_terminal_hangs_up_finishes_the_running_trial_and_writes_its_results(tmp_path: Path) -> None:
    """A search in a terminal that goes away (an ssh connection dropped, the window closed) got
    SIGHUP and died at once: the running trial was lost, its study trial left RUNNING, and no
    summary written. Now SIGHUP stops it as Ctrl-C does, and what it prints after the terminal is
    gone (EIO on every write) is dropped. The terminal here is a real pseudo-terminal, the
    search's controlling one, whose other end is closed."""
    import fcntl
    import pty
    import termios

    cfg = tiny_config(search={"backend": "optuna", "seed": 0}, budget={"trials": 5, "train_samples": 1024})
    path, out = tmp_path / "cfg.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    try:
        master, child_end = pty.openpty()
    except OSError as e:  # a container without /dev/pts
        pytest.skip(f"no pseudo-terminal here: {e}")

    def in_its_own_terminal() -> None:  # as a login shell's command: a session whose terminal is the pty
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "tune_batch", "search", str(path), "--output", str(out)],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=child_end,
                            stdout=child_end, stderr=child_end, start_new_session=True,
                            preexec_fn=in_its_own_terminal)
    os.close(child_end)
    shown: list[bytes] = []
    gone = threading.Event()
    reader = threading.Thread(target=_drain, args=(master, shown, gone), daemon=True)  # the terminal's screen
    reader.start()
    jsonl = out / "trials.jsonl"
    deadline = time.monotonic() + 120
    while not (jsonl.exists() and len(jsonl.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, b"".join(shown)[-2000:]
        time.sleep(0.1)
    gone.set()
    reader.join(timeout=10)  # a read in progress would keep the terminal open
    os.close(master)  # the terminal goes: the kernel sends SIGHUP to the search
    assert proc.wait(timeout=120) == 129, b"".join(shown)[-2000:]
    n = len(jsonl.read_text().splitlines())
    assert 2 <= n < 5
    pareto = json.loads((out / "pareto.json").read_text())  # the summary of what finished is written
    assert len(pareto["trials"]) >= 1 and (out / "results.csv").exists()
    states = [t.state for t in optuna.load_study(study_name="t", storage=f"sqlite:///{out / 'study.db'}").trials]
    assert len(states) == n and optuna.trial.TrialState.RUNNING not in states


def _drain(fd: int, into: list[bytes], gone: threading.Event) -> None:
    """Read a pseudo-terminal's output until ``gone`` is set (a search blocks on a full terminal)."""
    import select

    while not gone.is_set():
        if select.select([fd], [], [], 0.1)[0]:
            try:
                into.append(os.read(fd, 4096))
            except OSError:
                return


@pytest.mark.slow
def test_a_signal_during_the_confirmation_says_that_stage_was_cut(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """After the whole budget, a Ctrl-C during the confirmation runs said "interrupted after 2 of 2
    trials" under a summary recommending from the candidates that finished: now the cut stage and
    its runs left are named, and the same command runs the rest."""
    cfg = tiny_config(search={"backend": "optuna", "seed": 0}, budget={"trials": 2, "train_samples": 512},
                      confirm={"candidates": 1, "seeds": 3, "train_samples": 8192, "evaluations": 2, "target": 0.3})
    proc, out, cmd = _search_until(
        tmp_path, cfg, lambda lines: any('"confirm_of"' in x and '"confirm_of": null' not in x for x in lines), 180)
    jsonl = out / "trials.jsonl"
    # the first confirmation run is recorded; its progress line (a front computed) comes before the
    # second starts: a signal in that gap, seen once under a loaded CI, stops before the second runs
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # the second one running (8192 samples: about a second here)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    confirmed = [r for r in map(json.loads, jsonl.read_text().splitlines()) if r["info"].get("confirm_of") is not None]
    assert len(confirmed) == 2, [r["trial_id"] for r in confirmed]  # the running one finished, the third never began
    assert (f"interrupted during the confirmation runs, after all 2 trials, with 1 of its run(s) left: the summary "
            f"above is from what finished; it is kept in {out} (run the same command again to run the rest)") in stderr
    from tune_batch.cli import main  # `report` on the directory says the same, until the search is run again

    assert main(["report", str(out)]) == 0
    assert ("note: this search is unfinished (still running, or stopped): all 2 trials done, the confirmation runs "
            "with 1 run(s) left; the summary is from what finished") in capsys.readouterr().out
    proc = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    confirmed = [r for r in map(json.loads, jsonl.read_text().splitlines()) if r["info"].get("confirm_of") is not None]
    assert len(confirmed) == 3
    assert main(["report", str(out)]) == 0 and "unfinished" not in capsys.readouterr().out


def test_trials_of_a_study_optimized_on_several_threads_are_measured_one_at_a_time_in_one_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """study.optimize(n_jobs=2) ran two trials side by side: on 2 cores each read a third of the
    throughput measured alone (1950 against 6100 samples/s), and one at a time but each from its
    own Optuna thread still a third (OpenMP keeps a team per thread that ran torch). Now they run
    one at a time in one measuring thread, and the user is told once."""
    import threading

    import tune_batch.backends.local as local

    monkeypatch.setattr(local, "_SAID", threading.Event())
    cfg = tiny_config(space={"batch_size": [16, 32]})
    running, most, threads = [0], [0], set()
    guard = threading.Lock()

    def runner(config, params, **kw):
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threads.add(threading.current_thread().name)
        time.sleep(0.2)
        with guard:
            running[0] -= 1
        return _oom_at_64(config, params, **kw)

    study = optuna.create_study(directions=cfg.directions, sampler=optuna.samplers.RandomSampler(seed=0))
    with pytest.warns(RuntimeWarning, match="measures the trials of one process one at a time") as said:
        study.optimize(tune_batch.optuna.Objective(cfg, runner=runner), n_trials=6, n_jobs=3)
    assert len(said) == 1  # once, not per trial
    assert most[0] == 1 and len(threads) == 1 and threads.pop().startswith("tune_batch-trial")
    assert len(study.trials) == 6 and all(t.state.name == "COMPLETE" for t in study.trials)
    # from the main thread (n_jobs=1, tune_batch's own in-process backend) a trial runs where it is called
    threads.clear()
    study.optimize(tune_batch.optuna.Objective(cfg, runner=runner), n_trials=1)
    assert threads == {threading.main_thread().name}


def _oom_at_64(config, params, *, trial_id, extra, run_dir):
    """A trial looked up, not trained: batch 64 runs out of memory, batch 16 fits."""
    from tune_batch.store.records import Metrics, Status, TrialInfo, TrialResult

    if params.batch_size == 64:
        return TrialResult(trial_id, params, Status.OOM, "CUDA out of memory (looked up)")
    return TrialResult(trial_id, params, Status.OK, metrics=Metrics(samples_per_s=100.0, device_util=0.5,
                                                                     val_acc=0.5, peak_mem_bytes=1),
                       info=TrialInfo(train_s=1.0))


def test_a_skipped_proposal_uses_no_trial_of_the_budget() -> None:
    """The in-process search loop (backends.local.optimize): after batch 64 ran out of memory,
    proposals of 64 are skipped, told to Optuna as infeasible and recorded (free_skip), and the
    sampler is asked again: the budget of 3 trials is 3 trials that ran."""
    from tune_batch.backends.local import optimize
    from tune_batch.store.records import Status, TrialResult, budget_used
    from tune_batch.study.admission import FREE_SKIPS_IN_A_ROW

    cfg = tiny_config(space={"batch_size": [16, 64]})
    ran = []

    def runner(config, params, **kw):
        ran.append(params.batch_size)
        return _oom_at_64(config, params, **kw)

    study = optuna.create_study(directions=cfg.directions, sampler=optuna.samplers.RandomSampler(seed=0))
    for b in (64, 64, 64, 16):
        study.enqueue_trial({"batch_size": b, "lr": 0.01, "num_gpus": 1})
    objective = tune_batch.optuna.Objective(cfg, runner=runner, free_skips=True)
    optimize(study, objective, 3)
    recs = objective.records
    assert [r.status for r in recs[:4]] == [Status.OOM, Status.SKIPPED, Status.SKIPPED, Status.OK]
    assert [bool(r.info.free_skip) for r in recs[:4]] == [False, True, True, False]
    assert budget_used(recs) == 3 and len(ran) == 3  # three trials ran; the skips cost none
    frozen = study.get_trials()
    assert len(frozen) == len(recs) and all(t.state.name == "COMPLETE" for t in frozen)
    assert frozen[1].user_attrs["status"] == "skipped" and frozen[1].system_attrs["constraints"][0] > 0

    # every proposal infeasible: after FREE_SKIPS_IN_A_ROW in a row, skips use the budget (it ends)
    study = optuna.create_study(directions=cfg.directions, sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({"batch_size": 16, "lr": 0.01, "num_gpus": 1})
    everything_oom = tiny_config(space={"batch_size": [16, 64]})
    objective = tune_batch.optuna.Objective(
        everything_oom, free_skips=True,
        runner=lambda config, params, **kw: TrialResult(kw["trial_id"], params, Status.OOM, "looked up"))
    optimize(study, objective, 4)
    frees = sum(bool(r.info.free_skip) for r in objective.records)
    assert frees == FREE_SKIPS_IN_A_ROW and budget_used(objective.records) == 4


@pytest.mark.parametrize("name", ["gp", "tpe"])
def test_the_random_start_counts_trials_of_the_budget_not_free_skips(name: str) -> None:
    """A model-based sampler starts modelling after ``startup_trials`` trials that ran: the free
    skips told to the study in between (COMPLETE, infeasible) do not end its random start, as
    they did with Optuna's own n_startup_trials (which counts every COMPLETE trial)."""
    from tune_batch.backends.local import optimize
    from tune_batch.study.samplers import make_sampler, startup_trials

    cfg = tiny_config(space={"batch_size": [16, 64]})

    n = 9
    assert startup_trials(n) == 3
    sampler = make_sampler(name, 0, n)
    study = optuna.create_study(directions=cfg.directions, sampler=sampler)
    for b in (64, 64, 64, 16):  # an OOM, then two proposals skipped for free, then one that runs
        study.enqueue_trial({"batch_size": b, "lr": 0.01, "num_gpus": 1})
    objective = tune_batch.optuna.Objective(cfg, runner=_oom_at_64, free_skips=True)
    optimize(study, objective, 2)  # two trials of the budget: the OOM and batch 16
    frozen = study.get_trials()
    assert [t.user_attrs.get("free_skip", False) for t in frozen] == [False, True, True, False]
    # 4 COMPLETE trials: Optuna's own count would have ended a start of 3; only 2 of them ran
    assert sum(t.state.name == "COMPLETE" for t in frozen) == 4
    assert sampler._starting(study)
    optimize(study, objective, 3)  # until the third trial of the budget, which ends the random start
    assert not sampler._starting(study)


def test_the_sampler_is_told_each_steps_mean_throughput() -> None:
    """Samples/s belongs to the step, not to the learning rate: the sampler is told the mean over
    every run of the trial's step so far (Policy.told); the record and the trial's user
    attributes keep the trial's own reading."""
    from tune_batch.store.records import Metrics, Status, TrialInfo, TrialResult

    cfg = tiny_config(space={"batch_size": [32, 64]}, objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}])
    readings = {(32, 0.01): 1000.0, (32, 0.05): 1400.0, (64, 0.01): 3000.0}

    def runner(config, params, *, trial_id, extra, run_dir):  # a lookup of measured readings
        sps = readings[(params.batch_size, round(params.lr, 4))]
        return TrialResult(trial_id, params, Status.OK, info=TrialInfo(train_s=1.0),
                           metrics=Metrics(samples_per_s=sps, val_acc=0.5 + params.lr, peak_mem_bytes=1))

    study = optuna.create_study(directions=cfg.directions, sampler=optuna.samplers.RandomSampler(seed=0))
    for b, lr in readings:
        study.enqueue_trial({"batch_size": b, "lr": lr, "num_gpus": 1})
    objective = tune_batch.optuna.Objective(cfg, runner=runner)
    study.optimize(objective, n_trials=3)
    told = [t.values for t in study.get_trials()]
    assert told[0] == [1000.0, 0.51] and told[1] == [pytest.approx(1200.0), 0.55] and told[2] == [3000.0, 0.51]
    assert study.get_trials()[1].user_attrs["metrics"]["samples_per_s"] == 1400.0
    assert [r.metrics.samples_per_s for r in objective.records] == [1000.0, 1400.0, 3000.0]


def _third(lr: float, low: float = 1e-3, high: float = 1.0) -> int:
    import math

    return min(2, int(3 * math.log(lr / low) / math.log(high / low)))


@pytest.mark.parametrize("name", ["gp", "tpe"])
def test_the_random_start_puts_one_learning_rate_in_each_third_of_its_range(name: str) -> None:
    """The start-up's learning rates are a Latin hypercube over the log range: with 3 start-up
    trials one lies in each third, in an order that changes with the seed; a proposal skipped
    for free is redrawn in the same third. Batch sizes stay random."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from tune_batch.study.samplers import make_sampler, startup_trials

    space = {"batch_size": CategoricalDistribution([16, 32, 64]), "lr": FloatDistribution(1e-3, 1.0, log=True)}
    assert startup_trials(9) == 3
    orders = set()
    for seed in range(8):
        study = optuna.create_study(directions=["maximize", "maximize"], sampler=make_sampler(name, seed, 9))
        thirds = []
        for k in range(3):
            t = study.ask(space)
            if k == 1:  # skipped for free: told, and the next proposal takes its third
                skipped = _third(t.params["lr"])
                t.set_user_attr("free_skip", True)
                study.tell(t, [0.0, 0.0])
                t = study.ask(space)
                assert _third(t.params["lr"]) == skipped
            thirds.append(_third(t.params["lr"]))
            study.tell(t, [1.0, 0.5])
        assert sorted(thirds) == [0, 1, 2], (seed, thirds)
        orders.add(tuple(thirds))
    assert len(orders) > 1


def test_a_study_whose_trials_drew_from_other_choices_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """search --storage/--study-name on a study of batch sizes [16, 32], with the space [16, 32,
    64]: Optuna raised "CategoricalDistribution does not support dynamic value space" from inside
    the first trial, a traceback after the run directory was made. Now refused before it; and in
    the user's own study.optimize by the Objective, before its first trial trains."""
    from tune_batch.cli import main
    from tune_batch.errors import UserError
    from tune_batch.study.seam import distributions

    url = f"sqlite:///{tmp_path / 'mine.db'}"
    before = tiny_config(space={"batch_size": [16, 32]})
    study = optuna.create_study(study_name="mine", storage=url, directions=before.directions)
    study.add_trial(optuna.trial.create_trial(params={"batch_size": 16, "lr": 0.05, "num_gpus": 1},
                                              distributions=distributions(before.space), values=[100.0, 0.5, 0.5]))
    now = tiny_config(space={"batch_size": [16, 32, 64]})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(now.to_dict()))
    assert main(["search", str(path), "--storage", url, "--study-name", "mine", "--output", str(tmp_path / "o")]) == 2
    says = ("study 'mine' holds trials with batch_size drawn from [16, 32]; this search draws it from [16, 32, 64], "
            "and one Optuna study cannot mix the two; give the same space, or another study (--study-name)")
    assert capsys.readouterr().err == f"tune-batch: error: {says}\n" and not (tmp_path / "o").exists()
    ran = []
    with pytest.raises(UserError, match="cannot mix the two"):
        study.optimize(tune_batch.optuna.Objective(now, runner=lambda *a, **k: ran.append(1)), n_trials=1)
    assert not ran
    from tune_batch.study.seam import check_space

    check_space(url, "mine", before)  # the same choices: no refusal


def test_a_study_of_the_gpu_counts_a_backend_could_run_is_not_refused_for_the_configs_own(tmp_path: Path) -> None:
    """space.num_gpus [1, 2, 4] where the backend ran [1, 2] (a cluster without 4; the in-process
    backend runs [1]): its study's trials drew from those, which the early check must not refuse;
    the backend's own check, with its choices, passes them."""
    from tune_batch.errors import UserError
    from tune_batch.study.seam import check_space, distributions

    url = f"sqlite:///{tmp_path / 'mine.db'}"
    cfg = tiny_config(space={"batch_size": [16, 32, 64], "num_gpus": [1, 2, 4]})
    study = optuna.create_study(study_name="mine", storage=url, directions=cfg.directions)
    study.add_trial(optuna.trial.create_trial(params={"batch_size": 32, "lr": 0.05, "num_gpus": 2},
                                              distributions=distributions(cfg.space, [1, 2]), values=[1.0, 0.5, 0.5]))
    check_space(url, "mine", cfg, gpus=False)  # before the cluster is known
    check_space(url, "mine", cfg, [1, 2])  # the Ray searcher's, with the cluster's choices
    with pytest.raises(UserError, match="num_gpus drawn from \\[1, 2\\]; this search draws it from \\[1, 2, 4\\]"):
        check_space(url, "mine", cfg)


@pytest.mark.slow
@pytest.mark.ray
def test_a_search_refused_once_ray_is_up_leaves_no_directory_behind(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The Ray searcher refuses a study whose trials drew num_gpus from [1] where this cluster runs
    [1, 2]: a refusal after the run directory was made (as `--address auto` with no cluster is)
    left it behind, holding only config.yaml, an empty study and no record."""
    from tune_batch.cli import main
    from tune_batch.study.seam import distributions

    url = f"sqlite:///{tmp_path / 'mine.db'}"
    before = tiny_config(space={"batch_size": [16, 32]})
    study = optuna.create_study(study_name="mine", storage=url, directions=before.directions)
    study.add_trial(optuna.trial.create_trial(params={"batch_size": 32, "lr": 0.05, "num_gpus": 1},
                                              distributions=distributions(before.space), values=[1.0, 0.5, 0.5]))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config(space={"batch_size": [16, 32], "num_gpus": [1, 2]}).to_dict()))
    out = tmp_path / "o"
    assert main(["search", str(path), "--storage", url, "--study-name", "mine", "--output", str(out)]) == 2
    assert "holds trials with num_gpus drawn from [1]; this search draws it from [1, 2]" in capsys.readouterr().err
    assert not out.exists()
