"""The stages after the search as a backend receives them: planned one at a time, each only once
the one before it is recorded (``pipeline.stages.Planned``), and on Ray handed out by one
searcher in one Tune experiment (``backends.ray.searcher.Staged``). The whole search on Ray is in
test_search_ray (one experiment, its trial process reused from stage to stage)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from ray.tune.search import Searcher

from tests.conftest import tiny_config
from tune_batch.backends.ray.searcher import Staged
from tune_batch.backends.signals import received
from tune_batch.store.jobs import Job, JobKind
from tune_batch.store.records import Params, Status, TrialResult
from tune_batch.store.rundir import RunDir

P = Params.of({"batch_size": 32, "lr": 0.01, "num_gpus": 1})


class FirstSearcher:
    """Stands in for the study's searcher: proposes trial numbers 0, 1, ... and notes what it hears."""

    def __init__(self) -> None:
        self.n, self.heard = 0, []

    def suggest(self, trial_id: str) -> dict[str, Any]:
        self.n += 1
        return {**P.to_dict(), "trial_number": self.n - 1}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.heard.append(("result", trial_id))

    def on_trial_complete(self, trial_id: str, result: Any = None, error: bool = False) -> None:
        self.heard.append(("complete", trial_id))


def _run_dir(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "r")
    run.prepare(tiny_config())
    return run


def _record(run: RunDir, trial_id: object) -> None:
    run.append(TrialResult(trial_id, P, Status.OK))


def _jobs(*ids: str, kind: JobKind = JobKind.REPEAT) -> tuple[JobKind, list[Job]]:
    return kind, [Job(i, kind, 0, P, 1) for i in ids]


def test_a_stage_is_handed_out_only_once_everything_before_it_is_complete_and_recorded(tmp_path: Path) -> None:
    run, first = _run_dir(tmp_path), FirstSearcher()
    asked: list[int] = []
    stages = [_jobs("0s1", "1s1"), _jobs("0c0", kind=JobKind.CONFIRM)]

    def later():  # noqa: ANN202 (a generator; planned only when asked, as Planned is)
        for stage in stages:
            asked.append(len(run.records()[0]))
            yield stage

    s = Staged(first, 2, later(), run)
    assert [s.suggest("a")["trial_number"], s.suggest("b")["trial_number"]] == [0, 1]
    assert s.suggest("c") is None and not asked  # the search's trials are still running
    s.on_trial_result("a", {"x": 1})
    s.on_trial_complete("a")
    _record(run, 0)
    assert s.suggest("c") is None  # trial 1 is still running
    s.on_trial_complete("b")
    assert s.suggest("c") is None and not asked  # complete in Tune, but its record is not written yet
    _record(run, 1)
    # the repeats: planned once both trials were recorded, then handed out without waiting
    assert s.suggest("c")["trial_number"] == "0s1" and asked == [2]
    assert s.suggest("d")["trial_number"] == "1s1"
    assert first.heard == [("result", "a"), ("complete", "a"), ("complete", "b")]  # its own trials only
    s.on_trial_complete("c")
    s.on_trial_complete("d")
    _record(run, "0s1")
    assert s.suggest("e") is None  # 1s1 is not recorded yet
    _record(run, "1s1")
    spec = s.suggest("e")
    assert (spec["trial_number"], spec["confirm_of"], spec["seed"]) == ("0c0", 0, 1) and asked == [2, 4]
    s.on_trial_complete("e")
    _record(run, "0c0")
    assert s.suggest("f") == Searcher.FINISHED and s.suggest("g") == Searcher.FINISHED
    assert s.error is None and first.n == 2
    s.save(str(tmp_path / "ckpt"))  # Tune's checkpoint of the searcher: nothing (a search resumes from its records)
    assert not (tmp_path / "ckpt").exists()


def test_without_trials_left_the_first_stage_is_planned_at_once(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    s = Staged(None, 0, iter([_jobs("0c0", kind=JobKind.CONFIRM)]), run)
    assert s.suggest("a")["trial_number"] == "0c0"
    s.on_trial_complete("a")
    _record(run, "0c0")
    assert s.suggest("b") == Searcher.FINISHED


def test_an_error_while_planning_ends_the_experiment_and_is_kept_for_the_driver(tmp_path: Path) -> None:
    def later():  # noqa: ANN202
        raise ValueError("cannot plan")
        yield  # a generator

    s = Staged(None, 0, later(), _run_dir(tmp_path))
    assert s.suggest("a") == Searcher.FINISHED
    assert isinstance(s.error, ValueError) and str(s.error) == "cannot plan"
    assert s.suggest("b") == Searcher.FINISHED


def test_planned_stages_stop_at_a_signal_and_survive_pickling(tmp_path: Path) -> None:
    import pickle

    from tune_batch.backends.progress import Progress
    from tune_batch.pipeline.stages import Planned

    cfg = tiny_config(repeats={"seeds": 1, "candidates": 1})
    run = _run_dir(tmp_path)
    for i in range(cfg.budget.trials):
        run.append(TrialResult(i, Params.of({"batch_size": 16 * (i + 1), "lr": 0.05, "num_gpus": 1}), Status.OK,
                               metrics=_metrics(i)))
    planned = pickle.loads(pickle.dumps(Planned(cfg, run, Progress(cfg, 4, quiet=True))))  # as Tune pickles it
    received["signal"] = 2
    try:
        assert next(planned, None) is None  # stopped: nothing more is planned
    finally:
        received["signal"] = None
    kind, jobs = next(Planned(cfg, run, Progress(cfg, 4, quiet=True)))
    assert kind is JobKind.REPEAT and jobs and all(j.seed == 1 for j in jobs)


def _metrics(i: int) -> Any:
    from tune_batch.store.records import Metrics

    return Metrics.from_dict({"samples_per_s": 1000.0 * (i + 1), "device_util": 0.5, "val_acc": 0.9 - 0.1 * i})


@pytest.fixture(autouse=True)
def _no_signal() -> None:
    assert received["signal"] is None


def test_what_an_unfinished_search_has_left_is_said_for_report() -> None:
    from tune_batch.pipeline.stages import unfinished
    from tune_batch.store.records import Metrics

    def ok(i: int) -> TrialResult:
        return TrialResult(i, Params(16 * (i + 1), 0.01), Status.OK,
                           metrics=Metrics(samples_per_s=100.0 * (i + 1), device_util=0.5, val_acc=0.9 - 0.1 * i))

    cfg = tiny_config(budget={"trials": 3})
    assert unfinished(cfg, [ok(0), ok(1)]).startswith(
        "this search is unfinished (still running, or stopped): 2 of 3 trials done; the summary is from what finished")
    assert unfinished(cfg, [ok(0), ok(1), ok(2)]) is None  # no repeats, no confirmation: done
    repeated = tiny_config(budget={"trials": 3}, repeats={"seeds": 1, "candidates": 2})
    assert "all 3 trials done, the repeats of the front candidates with 2 run(s) left" in unfinished(
        repeated, [ok(0), ok(1), ok(2)])


def test_progress_counts_a_config_and_its_repeats_once_on_the_front() -> None:
    """A one-trial search whose config was re-measured with two seeds printed "front 1", "front
    2", "front 3": each repeat's reading counted as another point."""
    import io

    from tune_batch.backends.progress import Progress

    cfg = tiny_config(repeats={"seeds": 2, "candidates": 1})
    out = io.StringIO()
    progress = Progress(cfg, 3, stream=out)
    p = Params.of({"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    progress.finished(TrialResult(0, p, Status.OK, metrics=_metrics(0)))
    for seed in (1, 2):  # other seeds read it faster and less accurate: off the one reading's front
        rec = TrialResult(f"0s{seed}", p, Status.OK, metrics=_metrics(seed))
        progress.finished(dataclasses.replace(rec, info=dataclasses.replace(rec.info, repeat_of=0, seed=seed)))
    assert [line.split(" | ")[-2] for line in out.getvalue().splitlines()] == ["front 1"] * 3


def test_progress_lines_of_a_large_search_reuse_a_costly_front_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Computed for every line, the front of thousands of configs costs seconds each: where it took
    longer than FRONT_FREE_S, the lines within FRONT_EVERY times that cost show the last one, as of then."""
    import io
    import time
    import types

    from tune_batch.backends import progress as progress_mod

    calls = []

    def slow_report(config, records):  # what a front of thousands of configs costs
        calls.append(len(records))
        time.sleep(progress_mod.FRONT_FREE_S * 1.5)
        return types.SimpleNamespace(front=[0] * len(records))

    monkeypatch.setattr(progress_mod, "build_report", slow_report)
    cfg = tiny_config()
    out = io.StringIO()
    progress = progress_mod.Progress(cfg, 4, stream=out)
    p = Params.of({"batch_size": 32, "lr": 0.05, "num_gpus": 1})
    for i in range(4):
        progress.finished(TrialResult(i, p, Status.OK, metrics=_metrics(0)))
    fronts = [line.split(" | ")[-2] for line in out.getvalue().splitlines()]
    assert calls == [1] and fronts == ["front 1"] + ["front 1 (as of [1])"] * 3
    monkeypatch.setattr(progress_mod, "FRONT_EVERY", 0)  # its time has passed: computed again
    progress.finished(TrialResult(4, p, Status.OK, metrics=_metrics(0)))
    assert calls == [1, 5] and out.getvalue().splitlines()[-1].split(" | ")[-2] == "front 5"


def test_progress_counts_the_front_the_summary_shows() -> None:
    """The progress lines counted the front of single readings ("front 1" through a quickstart
    search) while its summary showed 9 configurations, their runs pooled and the noise respected."""
    import io

    from tune_batch.analysis.report import build_report
    from tune_batch.backends.progress import Progress
    from tune_batch.output.text import render_summary
    from tune_batch.store.records import Metrics

    cfg = tiny_config(repeats={"seeds": 2, "candidates": 1})
    out = io.StringIO()
    progress = Progress(cfg, 2, stream=out)
    a, b = (Params.of({"batch_size": n, "lr": lr, "num_gpus": 1}) for n, lr in ((16, 0.01), (32, 0.02)))

    def rec(tid: object, p: Params, sps: float, acc: float, seed: int = 0) -> TrialResult:
        r = TrialResult(tid, p, Status.OK, metrics=Metrics(samples_per_s=sps, device_util=0.9, val_acc=acc))
        return dataclasses.replace(r, info=dataclasses.replace(r.info, repeat_of=0, seed=seed)) if seed else r

    # b's one reading beats a's first in both objectives, but a's repeats spread wider than the gap
    for r in (rec(0, a, 1000.0, 0.90), rec(1, b, 1100.0, 0.91), rec("0s1", a, 1400.0, 0.80, 1),
              rec("0s2", a, 800.0, 0.95, 2)):
        progress.finished(r)
    summary = render_summary(build_report(cfg, progress.records))
    assert "Pareto front: 2 configuration(s)" in summary
    assert out.getvalue().splitlines()[-1].split(" | ")[-2] == "front 2"


def test_the_time_left_counts_the_confirmation_runs_to_come_at_their_length() -> None:
    """The progress line's "~ left" was the mean run so far times the runs in the total, which
    grows only when a stage is planned: it read ~0:00 at the last trial of a search whose
    confirmation runs took minutes more (131 stored searches: `scripts/bench_eta.py`)."""
    from tune_batch.backends.progress import Progress
    from tune_batch.store.records import Metrics, TrialInfo

    cfg = tiny_config(budget={"trials": 2, "train_samples": 1024}, repeats={"seeds": 0},
                      confirm={"candidates": 2, "seeds": 1}, baseline={"batch_size": 32, "lr": 0.01})
    progress = Progress(cfg, 2, quiet=True)

    def run(i: object, seconds: float, samples: int, confirm_of: object = None) -> None:
        # 1024 samples/s: a trial (1024 samples) trains 1 s of its 3, a confirmation run 8 s of its 12
        progress.finished(TrialResult(i, P, Status.OK, metrics=Metrics(samples_per_s=1024.0, val_acc=0.5),
                                      duration_s=seconds, info=TrialInfo(train_samples_done=samples,
                                                                         confirm_of=confirm_of)))

    run(0, 3.0, 1024)
    # one trial at 3 s, then 2 candidates + the baseline at 8192 samples: 2 s overhead + 8 s each
    assert progress.left_s(1, 3.0) == pytest.approx(3.0 + 3 * 10.0)
    run(1, 3.0, 1024)
    assert progress.left_s(2, 6.0) == pytest.approx(30.0)  # the old estimate: 0
    assert progress.left_s(2, 12.0) == pytest.approx(60.0)  # at half the pace (a busy machine), twice as long
    progress.confirming(3)
    run("0c0", 12.0, 8192, confirm_of=0)  # the confirmation runs' own overhead (4 s) from now on
    assert progress.left_s(3, 18.0) == pytest.approx(2 * 12.0)
    for i in ("1c0", "baseline-c0"):
        run(i, 12.0, 8192, confirm_of=i[0])
    progress.confirming(1)  # a second look: one run of the next candidate, at the same length
    assert progress.left_s(5, 42.0) == pytest.approx(12.0)
