"""The tools users already open: Optuna's own views of the study, pandas."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

import tune_batch
from tests.conftest import tiny_config
from tune_batch.pipeline.search import search
from tune_batch.store.records import Metrics, Status, TrialResult


@pytest.mark.slow
def test_the_study_is_named_the_run_loads_into_pandas_and_goes_to_mlflow(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny_config(search={"backend": "optuna", "log_to": ["mlflow"]}, budget={"trials": 3},
                      objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}], repeats={"seeds": 1,
                                                                                                "candidates": 1})
    res = search(cfg, tmp_path / "run", quiet=True)
    study = optuna.load_study(study_name=cfg.name, storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}")
    assert study.metric_names == ["samples_per_s", "val_acc"]
    assert study.user_attrs["tune_batch_recommended_trial"] == res.recommended.trial_id
    assert study.user_attrs["tune_batch_run_dir"] == str((tmp_path / "run").resolve())
    # the final, noise-aware front where Optuna's views look (best_trials is Optuna's own, from
    # the values told as each trial ended)
    assert study.user_attrs["tune_batch_front"] == sorted(r.trial_id for r in res.front)
    lines = (tmp_path / "run" / "trials.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    attrs = study.trials[0].user_attrs  # every metric its own attribute too (one row each in optuna-dashboard)
    assert attrs["metric:samples_per_s"] == first["metrics"]["samples_per_s"] == attrs["metrics"]["samples_per_s"]
    assert attrs["metric:val_acc"] == first["metrics"]["val_acc"]
    frame = tune_batch.load_run(tmp_path / "run")
    assert frame.shape[0] == len(lines) == 4  # 3 trials and a repeat
    assert list(frame["kind"].astype(str)) == ["trial", "trial", "trial", "repeat"]
    assert str(frame["batch_size"].dtype) == "int64" and frame["samples_per_s"].dtype.kind == "f"
    assert set(frame["trial_id"]) == {str(json.loads(x)["trial_id"]) for x in lines}
    assert res.dataframe().shape[0] == frame.shape[0]

    # MLflow (a real local store in the run directory): one run for the search, one nested run per record
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{(tmp_path / 'run').resolve() / 'mlflow.db'}")

    def runs() -> list:
        return client.search_runs([client.get_experiment_by_name(cfg.name).experiment_id])

    parents = [r for r in runs() if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs() if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == len(lines)
    p = parents[0].data
    assert p.tags["recommended_trial"] == str(res.recommended.trial_id)
    assert p.tags["objectives"] == "samples_per_s,val_acc"
    assert p.tags["recommended_batch_size"] == str(res.recommended.params.batch_size) and p.metrics["records"] == 3
    for m in ("samples_per_s", "val_acc"):  # the recommendation's figures, as the front's: comparable across searches
        mean, ci = res.report.stat(res.recommended, m)
        assert p.metrics[f"recommended_{m}"] == pytest.approx(mean)
        assert ci is None or p.metrics[f"recommended_{m}_ci"] == pytest.approx(ci)
    by_id = {c.data.tags["tune_batch.trial_id"]: c.data for c in children}
    for x in map(json.loads, lines):
        c = by_id[str(x["trial_id"])]
        assert c.tags["status"] == x["status"] and c.params["batch_size"] == str(x["params"]["batch_size"])
        assert c.metrics["samples_per_s"] == x["metrics"]["samples_per_s"]
    artifacts = {f.path for f in client.list_artifacts(parents[0].info.run_id)}
    assert {"pareto.json", "results.csv", "report.html"} <= artifacts
    # the same run directory again (resume: nothing left to run): nothing is logged twice
    search(cfg, tmp_path / "run", quiet=True)
    assert len(runs()) == 1 + len(lines)
    # a tracking server named as every MLflow tool reads it, MLFLOW_TRACKING_URI: the records go there
    # (they went to the run directory's store, and the server saw nothing)
    from tune_batch.output.tracking import log_to_mlflow

    server = f"sqlite:///{(tmp_path / 'server.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    # a store without an artifact root of its own keeps artifacts in ./mlruns (MLflow's default): here
    monkeypatch.chdir(tmp_path)
    uri, _, sent = log_to_mlflow(res.report, tmp_path / "run")
    assert uri == server and sent == len(lines) and len(runs()) == 1 + len(lines)
    theirs = MlflowClient(server)
    assert len(theirs.search_runs([theirs.get_experiment_by_name(cfg.name).experiment_id])) == 1 + len(lines)


@pytest.mark.slow
def test_optunas_own_pareto_plot_names_objectives_and_sets_infeasible_trials_apart(tmp_path: Path) -> None:
    cfg = tiny_config(search={"backend": "optuna"}, budget={"trials": 3},
                      model={"name": "tests.workloads:oom_above", "kwargs": {"limit": 32}},
                      space={"batch_size": [16, 32, 64]}, resources={"feasibility_model": False},
                      objectives=[{"metric": "samples_per_s"}, {"metric": "val_acc"}])
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="plots", storage=storage, directions=cfg.directions)
    for b in (16, 64, 32):  # the second runs out of memory (the model refuses more than 32 samples)
        study.enqueue_trial({"batch_size": b, "lr": 0.05, "num_gpus": 1})
    search(cfg, tmp_path / "run", storage_url=storage, study_name="plots", quiet=True)

    study = optuna.load_study(study_name="plots", storage=storage)
    assert study.metric_names == ["samples_per_s", "val_acc"]
    assert study.user_attrs["tune_batch_constraints"] == ["memory", "space", "diverged"]
    oom = next(t for t in study.trials if t.params["batch_size"] == 64)
    ok = [t for t in study.trials if t.user_attrs["status"] == "ok"]
    assert oom.user_attrs["status"] == "oom" and len(ok) == 2
    assert oom.system_attrs["constraints"] == [1.0, 0.0, 0.0] and oom.constraints["0"] == 1.0
    # told the worst values the feasible trials before it reached, not zeros: plots keep their scale
    assert oom.values == [ok[0].values[0], ok[0].values[1]] and oom.values[0] > 0
    fig = optuna.visualization.plot_pareto_front(study)
    assert fig.layout.xaxis.title.text == "samples_per_s" and fig.layout.yaxis.title.text == "val_acc"
    grey = [tr for tr in fig.data if tr.marker.color == "#cccccc"]  # Optuna draws infeasible trials grey
    assert len(grey) == 1 and list(grey[0].x) == [oom.values[0]]
    shown = [x for tr in fig.data if tr.marker.color != "#cccccc" for x in tr.x]
    assert sorted(shown) == sorted(t.values[0] for t in ok)  # the front and the dominated: ok trials only


DASHBOARD = shutil.which("optuna-dashboard")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _looked_up(config, params, trial_id=None, **_):  # a trial's result looked up, not trained
    if params.batch_size == 64:
        return TrialResult(trial_id, params, Status.OOM, "OutOfMemoryError: over the cap", duration_s=0.1)
    m = Metrics(samples_per_s=40.0 * params.batch_size, device_util=0.9, val_acc=1.0 - params.batch_size / 100)
    return TrialResult(trial_id, params, Status.OK, None, m, duration_s=1.0)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None or DASHBOARD is None,
                    reason="needs chromium and optuna-dashboard (pip install optuna-dashboard)")
@pytest.mark.slow
def test_optuna_dashboard_names_the_objectives_and_sees_the_constraints(tmp_path: Path) -> None:
    from tune_batch.optuna import Objective
    from tune_batch.study import seam

    cfg = tiny_config(space={"batch_size": [16, 32, 64]})  # the three default objectives
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = seam.create(cfg, storage, "dash", optuna.samplers.RandomSampler(seed=0))
    for b in (16, 64, 32):
        study.enqueue_trial({"batch_size": b, "lr": 0.05, "num_gpus": 1})
    study.optimize(Objective(cfg, runner=_looked_up), n_trials=3)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([DASHBOARD, storage, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):  # up in a few seconds
            try:
                studies = json.load(urllib.request.urlopen(f"{base}/api/studies", timeout=2))["study_summaries"]
                break
            except OSError:
                time.sleep(0.2)
        sid = studies[0]["study_id"]
        detail = json.load(urllib.request.urlopen(f"{base}/api/studies/{sid}", timeout=10))
        assert detail["objective_names"] == ["samples_per_s", "device_util", "val_acc"]
        constraints = {t["params"][0]["param_external_value"]: t["constraints"] for t in detail["trials"]
                       if t["params"] and t["params"][0]["name"] == "batch_size"}
        assert constraints == {"16": [0.0, 0.0, 0.0], "32": [0.0, 0.0, 0.0], "64": [1.0, 0.0, 0.0]}
        ok_trial = next(t for t in detail["trials"] if t["params"] and t["params"][0]["param_external_value"] == "16")
        shown = {a["key"]: a["value"] for a in ok_trial["user_attrs"]}
        assert shown["metric:samples_per_s"] == "640.0" and shown["status"] == "ok"  # one row per metric
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
                 "--virtual-time-budget=15000"]
        p = subprocess.run([CHROMIUM, *flags, "--dump-dom", f"{base}/dashboard/studies/{sid}"],
                           capture_output=True, text=True, timeout=120)
        dom = p.stdout
        assert p.returncode == 0, p.stderr[-2000:]
        for name in ("samples_per_s", "device_util", "val_acc"):  # the page names them, not "Objective 0"
            assert name in dom, name
        assert "Objective 0" not in dom
    finally:
        server.kill()
        server.wait()


def test_the_mlflow_browse_hint_is_one_shell_word_where_the_path_has_a_space(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlflow ui --backend-store-uri sqlite:////tmp/ml run/mlflow.db`, pasted, gave mlflow two words."""
    import io
    import shlex
    import types

    from tune_batch.backends.progress import Progress
    from tune_batch.output import tracking
    from tune_batch.pipeline.search import _send_to_trackers

    uri = "sqlite:////tmp/ml run/mlflow.db"
    monkeypatch.setattr(tracking, "log_to_mlflow", lambda report, path, uri_=None: (uri, "r1", 1))
    cfg = tiny_config(search={"log_to": ["mlflow"]})
    out = io.StringIO()
    run_dir = types.SimpleNamespace(has_records=lambda: True, path=Path("/tmp/ml run"))
    _send_to_trackers(cfg, None, run_dir, Progress(cfg, 1, stream=out))  # type: ignore[arg-type]
    hint = out.getvalue().split("to browse: ", 1)[1].strip()
    assert shlex.split(hint) == ["mlflow", "ui", "--backend-store-uri", uri]
