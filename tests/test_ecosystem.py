"""The tools users already open: Optuna's own views of the study, pandas."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

import tune_batch
from tests.conftest import tiny_config
from tune_batch.runner import search


def test_the_study_is_named_and_the_run_loads_into_pandas(tmp_path: Path) -> None:
    cfg = tiny_config(search={"backend": "optuna"}, budget={"trials": 3},
                      objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}], repeats={"seeds": 1,
                                                                                                "candidates": 1})
    res = search(cfg, tmp_path / "run", quiet=True)
    study = optuna.load_study(study_name=cfg.name, storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}")
    assert study.metric_names == ["samples_per_s", "val_acc"]
    assert study.user_attrs["tune_batch_recommended_trial"] == res.recommended.trial_id
    assert study.user_attrs["tune_batch_run_dir"] == str((tmp_path / "run").resolve())
    lines = (tmp_path / "run" / "trials.jsonl").read_text().splitlines()
    frame = tune_batch.load_run(tmp_path / "run")
    assert frame.shape[0] == len(lines) == 4  # 3 trials and a repeat
    assert list(frame["kind"].astype(str)) == ["trial", "trial", "trial", "repeat"]
    assert str(frame["batch_size"].dtype) == "int64" and frame["samples_per_s"].dtype.kind == "f"
    assert set(frame["trial_id"]) == {str(json.loads(x)["trial_id"]) for x in lines}
    assert res.dataframe().shape[0] == frame.shape[0]
