"""Escalation: when neither the short trials nor the confirmation learned anything, rounds 4x
longer over the better half of the configs, until one learns or confirm.escalations is spent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tune_batch.decide.escalate import escalations
from tune_batch.decide.recommend import decide, spread
from tune_batch.output.text import render_summary
from tune_batch.pipeline.search import search
from tune_batch.store.records import TrialResult

OBJ = [{"metric": "samples_per_s"}, {"metric": "val_acc"}]


def _rec(tid, acc, b=16, lr=0.01, **info) -> TrialResult:
    return TrialResult.from_record({
        "trial_id": tid, "params": {"batch_size": b, "lr": lr, "num_gpus": 1}, "status": "ok",
        "metrics": {"samples_per_s": 1000.0, "val_acc": acc, "peak_mem_bytes": 2**20 * b},
        "info": {"seed": 0, "chance_acc": 0.1, **info}})


def _run(tid, of, accs, samples, lr=0.01, rung=None) -> TrialResult:
    step = samples // len(accs)
    curve = [[step * (i + 1), 1.0 * (i + 1), a, 2.3] for i, a in enumerate(accs)]
    return _rec(tid, accs[-1], lr=lr, confirm_of=of, curve=curve, train_samples_done=samples, rung=rung)


def _config(**confirm):
    return tiny_config(objectives=OBJ, data={"name": "digits", "resize": 16, "val_samples": 2000},
                       confirm={"candidates": 3, "seeds": 1, **confirm})


SHORT = [_rec(0, 0.10, lr=1e-4), _rec(1, 0.11, lr=1e-3), _rec(2, 0.09, lr=1e-2), _rec(3, 0.10, lr=1e-1)]


def test_nothing_learned_anywhere_plans_a_round_4x_longer_over_the_better_half() -> None:
    cfg = _config()
    assert not decide(cfg, SHORT).learned
    first = [_run("0c0", 0, [0.10, 0.10], 2048, lr=1e-4), _run("2c0", 2, [0.10, 0.108], 2048, lr=1e-2),
             _run("3c0", 3, [0.10, 0.105], 2048, lr=1e-1)]
    jobs = escalations(cfg, SHORT + first)
    assert [j.trial_id for j in jobs] == ["2c0r2", "3c0r2"]  # the better half (2 of 3), by the best reached
    assert {j.samples for j in jobs} == {4 * 2048} and {j.rung for j in jobs} == {2}
    # round 2 recorded, nothing learned, one more allowed (escalations 2): round 3 over one config
    second = [_run("2c0r2", 2, [0.10, 0.104], 8192, lr=1e-2, rung=2),
              _run("3c0r2", 3, [0.1, 0.109], 8192, lr=1e-1, rung=2)]
    third = escalations(cfg, SHORT + first + second)
    assert [(j.trial_id, j.samples, j.rung) for j in third] == [("3c0r3", 32768, 3)]
    # the cap: after confirm.escalations rounds, none
    done = [_run("3c0r3", 3, [0.1, 0.1], 32768, lr=1e-1, rung=3)]
    assert escalations(cfg, SHORT + first + second + done) == []
    report = decide(cfg, SHORT + first + second + done)
    assert report.recommended is None and report.confirmation.rung == 3
    assert "nothing was learned in the confirmation runs either (up to 32768 samples, 3 rounds)" in render_summary(
        report)
    # off: no rounds at all; a goal length is the user's run: no rounds either
    assert escalations(_config(escalations=0), SHORT + first) == []
    goal = tiny_config(objectives=OBJ, data={"name": "digits", "resize": 16, "val_samples": 2000},
                       confirm={"candidates": 3, "seeds": 1}, goal={"train_samples": 2048})
    assert escalations(goal, SHORT + first) == []


def test_a_round_that_learns_ends_the_escalation_and_decides() -> None:
    cfg = _config()
    first = [_run("0c0", 0, [0.10, 0.10], 2048, lr=1e-4), _run("2c0", 2, [0.10, 0.108], 2048, lr=1e-2),
             _run("3c0", 3, [0.10, 0.105], 2048, lr=1e-1)]
    second = [_run("2c0r2", 2, [0.3, 0.8, 0.95], 8192, lr=1e-2, rung=2),
              _run("3c0r2", 3, [0.2, 0.5, 0.9], 8192, lr=1e-1, rung=2)]
    assert escalations(cfg, SHORT + first + second) == []
    report = decide(cfg, SHORT + first + second)
    conf = report.confirmation
    assert conf.rung == 2 and report.recommended.trial_id == 2  # read from the last round's runs only
    assert {c.trial.trial_id for c in conf.candidates} == {2, 3}
    assert "escalated: nothing was learned at shorter lengths; round 2" in render_summary(report)
    assert conf.to_dict()["escalation_round"] == 2


def test_short_trials_that_learned_nothing_confirm_configs_spread_over_the_learning_rates() -> None:
    trials = [_rec(i, 0.1, b=b, lr=lr) for i, (b, lr) in enumerate(
        [(16, 1e-4), (32, 3e-4), (16, 1e-3), (64, 3e-3), (16, 1e-2), (32, 1e-1)])]
    assert [r.params.lr for r in spread(trials, 3)[:3]] == [1e-4, 1e-3, 1e-1]  # lowest, middle, highest
    assert [r.params.lr for r in spread(trials, 1)[:1]] == [3e-3]
    assert len(spread(trials, 10)) == 6


def test_by_default_two_candidates_are_confirmed_and_three_rates_when_nothing_was_learned() -> None:
    from tune_batch.analysis.report import build_report
    from tune_batch.config.schema import ConfirmConfig
    from tune_batch.decide.recommend import confirm_candidates

    assert ConfirmConfig().candidates == 2
    cfg = _config(candidates=ConfirmConfig().candidates)
    nothing = confirm_candidates(build_report(cfg, SHORT))
    assert [r.params.lr for r in nothing] == [1e-4, 1e-2, 1e-1]  # the lowest, the middle, the highest
    learned = [_rec(i, acc, b=b, lr=lr) for i, (acc, b, lr) in enumerate(
        [(0.95, 16, 1e-3), (0.97, 32, 1e-2), (0.90, 64, 1e-1), (0.93, 128, 3e-2)])]
    assert len(confirm_candidates(build_report(cfg, learned))) == 2
    assert len(confirm_candidates(build_report(cfg.model_copy(update={"confirm": cfg.confirm.model_copy(
        update={"candidates": 4})}), SHORT))) == 4  # more when asked


@pytest.mark.slow
def test_a_search_that_learns_nothing_escalates_within_its_cap_and_says_so(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # a learning rate far too small to learn anything at any length tried: three confirmation
    # candidates spread over the learning rates (at least 3 when nothing was learned, although
    # confirm.candidates is 2), then one round 4x longer over the better two
    cfg = tiny_config(search={"backend": "optuna"}, budget={"trials": 3, "train_samples": 512},
                      data={"name": "synthetic", "resize": 16, "synthetic_samples": 1024, "val_samples": 400},
                      space={"batch_size": {"min": 16, "max": 32}, "lr": {"low": 1e-7, "high": 2e-7}},
                      objectives=OBJ, confirm={"candidates": 2, "seeds": 1, "evaluations": 2, "escalations": 1,
                                              "train_samples": 2048})
    res = search(cfg, tmp_path / "run")
    out = capsys.readouterr().out
    recs = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    first = [r for r in recs if r["info"].get("confirm_of") is not None and not r["info"].get("rung")]
    second = [r for r in recs if r["info"].get("rung") == 2]
    assert len(first) == 3 and len(second) == 2, [r["trial_id"] for r in recs]
    assert len({r["params"]["lr"] for r in first}) == 3 and all(r["trial_id"].endswith("c0r2") for r in second)
    assert second[0]["info"]["train_samples_done"] >= 3 * max(r["info"]["train_samples_done"] for r in first)
    assert "escalating: nothing learned yet; 2 run(s) of" in out
    assert res.recommended is None and "2 rounds)" in out
    conf = json.loads((tmp_path / "run" / "pareto.json").read_text())["confirmation"]
    assert conf["escalation_round"] == 2
    # continued: nothing left to run, nothing rerun
    search(cfg, tmp_path / "run", quiet=True)
    again = (tmp_path / "run" / "trials.jsonl").read_text().splitlines()
    assert len(again) == len(recs)
