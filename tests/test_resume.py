"""A search resumed after a crash cut the last line of trials.jsonl: the cut line is set aside
once, its trial or job runs again as it would have the first time, with its lineage, and the
budget of search trials is what it was. In process (Optuna backend) for a cut search trial, repeat
and confirmation run; on Ray for a cut search trial and confirmation run (a repeat is a planned job
run by the same Ray path as a confirmation run, so it is not run there again: 27 s of the suite)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tune_batch.pipeline.search import search

pytestmark = [pytest.mark.slow]

KINDS = {"searched": lambda r: r["info"].get("repeat_of") is None and r["info"].get("confirm_of") is None,
         "repeat": lambda r: r["info"].get("repeat_of") is not None,
         "confirm": lambda r: r["info"].get("confirm_of") is not None}


def _config(backend: str):
    return tiny_config(search={"backend": backend, "seed": 0}, budget={"trials": 3, "train_samples": 512},
                       repeats={"candidates": 1, "seeds": 1},
                       confirm={"candidates": 1, "seeds": 1, "train_samples": 1024, "evaluations": 2})


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]


def _finished(backend: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One whole search on ``backend``, every kind of record in it."""
    run = tmp_path_factory.mktemp(f"whole-{backend}") / "run"
    search(_config(backend), run, quiet=True)
    kinds = {k for k, is_kind in KINDS.items() for r in _records(run) if is_kind(r)}
    assert kinds == set(KINDS), kinds
    return backend, run


@pytest.fixture(scope="module")
def finished_in_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return _finished("optuna", tmp_path_factory)


@pytest.fixture(scope="module")
def finished_on_ray(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return _finished("ray", tmp_path_factory)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_cut_last_record_is_set_aside_and_its_run_measured_again(
        finished_in_process: tuple[str, Path], kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _cut_and_resume(finished_in_process, kind, tmp_path, capfd)


@pytest.mark.parametrize("kind", ["searched", "confirm"])
def test_a_cut_last_record_is_set_aside_and_its_run_measured_again_on_ray(
        finished_on_ray: tuple[str, Path], kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _cut_and_resume(finished_on_ray, kind, tmp_path, capfd)


def _cut_and_resume(finished: tuple[str, Path], kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    backend, whole = finished
    run = tmp_path / "run"
    shutil.copytree(whole, run, ignore=shutil.ignore_patterns("ray", ".lock"))
    lines = (run / "trials.jsonl").read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if KINDS[kind](json.loads(line)))
    cut = json.loads(lines[last])
    # the crash: everything after that record never happened, and its own line was cut short
    (run / "trials.jsonl").write_text("".join(lines[:last]) + lines[last][:-40])
    capfd.readouterr()

    result = search(_config(backend), run, quiet=True)

    out = capfd.readouterr()
    assert "ERROR" not in out.out + out.err, (out.out + out.err)[-3000:]
    recs = _records(run)
    assert all(r["status"] == "ok" for r in recs), [(r["trial_id"], r["reason"]) for r in recs]
    searched = [r for r in recs if KINDS["searched"](r) and not r["info"].get("free_skip")]
    assert len(searched) == 3
    ids = [r["trial_id"] for r in recs]
    assert len(ids) == len(set(ids))  # one record per trial and per planned job
    if kind != "searched":  # the cut job ran again under its own name (a cut trial gets a new number)
        assert cut["trial_id"] in ids
    for r in recs:  # lineage on every record of a stage job (ids "<trial>s<seed>", "<trial>c<seed>")
        if isinstance(r["trial_id"], str):
            lineage = r["info"].get("repeat_of") if "s" in r["trial_id"] else r["info"].get("confirm_of")
            assert lineage is not None and r["info"]["seed"] is not None, r
    assert (run / "trials.jsonl.broken").read_text() == lines[last][:-40] + "\n"
    assert len(result.report.records) == 3 and result.report.confirmation is not None
    # read again: nothing broken is left to warn about
    search(_config(backend), run, quiet=True)
    assert "broken" not in capfd.readouterr().err and _records(run) == recs
