from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tune_batch.analysis.report import build_report
from tune_batch.errors import RunDirError
from tune_batch.output.files import write_files
from tune_batch.output.frames import to_frame
from tune_batch.store.records import Status, TrialResult
from tune_batch.store.rundir import RunDir, load_records


def _rec(i: int, status: str = "ok", sps: float = 1.0, acc: float = 0.5, b: int = 16) -> TrialResult:
    return TrialResult.from_record({
            "trial_id": i, "params": {"batch_size": b, "lr": 0.01, "num_gpus": 1}, "status": status, "reason": None,
            "metrics": {"samples_per_s": sps, "device_util": 0.9, "val_acc": acc} if status == "ok" else {},
            "duration_s": 1.0, "info": {}})


def test_append_is_durable_and_a_cut_line_is_reported(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.prepare(tiny_config())
    run.append(_rec(0))
    run.append(_rec(1))
    with run.trials_path.open("a") as f:
        f.write('{"trial_id": 2, "params": {"batch')  # power cut mid-line
    recs, warnings = load_records(run.trials_path)
    assert [r.trial_id for r in recs] == [0, 1]
    assert len(warnings) == 1 and "line 3 is broken" in warnings[0]
    # the next record starts on a fresh line: the cut line stays broken, the new one loads
    run.append(_rec(3))
    recs, warnings = load_records(run.trials_path)
    assert [r.trial_id for r in recs] == [0, 1, 3] and len(warnings) == 1


def test_lines_that_are_not_trial_records_are_reported_and_skipped(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    run.prepare(tiny_config())
    run.append(_rec(0))
    with run.trials_path.open("a") as f:
        f.write('{"foo": 1}\n{"trial_id": 9, "status": "ok"}\n{"trial_id": 8, "params": {"batch_size": 16, "lr": 0.1}, '
                '"status": "nonsense"}\n')
    recs, warnings = load_records(run.trials_path)
    assert [r.trial_id for r in recs] == [0]
    assert len(warnings) == 3 and all("not a trial record" in w for w in warnings)
    # an `ok` record with a NaN metric (a trial never writes one: a NaN loss is `diverged`) is not ok
    nan = {**_rec(1).to_record(), "metrics": {**_rec(1).to_record()["metrics"], "val_acc": float("nan")}}
    with run.trials_path.open("a") as f:
        f.write(json.dumps(nan) + "\n")
    recs, warnings = load_records(run.trials_path)
    assert [(r.trial_id, r.status) for r in recs] == [(0, Status.OK), (1, Status.FAILED)]
    assert "non-finite val_acc" in warnings[-1] and "read as failed" in warnings[-1]
    assert "non-finite val_acc" in recs[1].reason


def test_a_different_config_is_refused_naming_the_keys(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    assert run.prepare(tiny_config()) is False
    assert run.prepare(tiny_config(budget={"trials": 9})) is True  # more trials: a continuation
    with pytest.raises(RunDirError, match="space.lr.high"):
        run.prepare(tiny_config(space={"lr": {"low": 0.01, "high": 0.5}}))
    assert run.prepare(tiny_config(space={"lr": {"low": 0.01, "high": 0.5}}), force=True) is True


def test_a_foreign_non_empty_directory_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("precious")
    with pytest.raises(RunDirError, match="not a tune_batch run directory"):
        RunDir(d).prepare(tiny_config())
    assert (d / "thesis.tex").read_text() == "precious"


def test_report_files_from_records(tmp_path: Path) -> None:
    cfg = tiny_config()
    recs = [_rec(0, sps=10, acc=0.9), _rec(1, sps=20, acc=0.5, b=64), _rec(2, sps=5, acc=0.4, b=32), _rec(3, "oom")]
    report = build_report(cfg, recs)
    assert {r.trial_id for r in report.front} == {0, 1}
    write_files(report, tmp_path)
    pareto = json.loads((tmp_path / "pareto.json").read_text())
    assert {t["trial_id"] for t in pareto["trials"]} == {0, 1}
    assert pareto["recommended_trial_id"] in {0, 1}
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("trial_id,kind,status,reason,batch_size,lr,num_gpus")
    header = rows[0].split(",")
    assert {"sm_active", "tensor_active", "energy_j_per_sample", "bottleneck", "runs", "step_runs"} <= set(header)
    assert {f"{m}_{s}" for m in cfg.metric_names for s in ("mean", "ci")} <= set(header)
    import pandas as pd  # the CSV is the run's DataFrame written out: it reads back with the same columns

    back = pd.read_csv(tmp_path / "results.csv")
    assert list(back.columns) == list(to_frame(recs, report).columns) and back.shape[0] == 4


def test_best_yaml_and_export_state_the_recommendations_means_with_their_noise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """best.yaml and `export` printed one trial's own reading as "measured" (a Keras run: val_acc
    0.95, while the front read 0.921 +- 0.137 over its two runs): now the front's figures."""
    from tune_batch.cli import main

    run = RunDir(tmp_path / "run")
    run.prepare(tiny_config())
    runs = {0: [(10.0, 0.90), (14.0, 0.80)], 1: [(20.0, 0.50), (23.0, 0.56)]}
    for tid, readings in runs.items():
        for seed, (sps, acc) in enumerate(readings):
            rec = _rec(tid, sps=sps, acc=acc, b=16 if tid == 0 else 64).to_record()
            if seed:
                rec["trial_id"], rec["info"] = f"{tid}s{seed}", {"repeat_of": tid}
            run.append(TrialResult.from_record(rec))
    assert main(["report", str(run.path)]) == 0
    pareto = json.loads((run.path / "pareto.json").read_text())
    rec = next(t for t in pareto["trials"] if t["trial_id"] == pareto["recommended_trial_id"])
    sps, acc = (statistics.fmean(x[i] for x in runs[rec["trial_id"]]) for i in (0, 1))
    assert rec["metrics"]["samples_per_s"] == pytest.approx(sps) and rec["metrics"]["val_acc"] == pytest.approx(acc)
    figures = (f"samples_per_s={sps:.4g} +- {rec['metrics']['samples_per_s_ci']:.3g}, device_util=0.9 +- 0, "
               f"val_acc={acc:.4g} +- {rec['metrics']['val_acc_ci']:.3g} (at the trial budget, 1024 samples: "
               f"mean +- 95 % half-width over 2 run(s))")
    assert f"# measured: {figures}\n" in (run.path / "best.yaml").read_text()
    capsys.readouterr()
    assert main(["export", str(run.path), "--to", "lightning"]) == 0
    out = capsys.readouterr().out
    assert f"; measured {figures}\n" in out
    # the lr holds for the optimizer it was measured with: said, and no claim about Lightning's groups
    assert "# trained with sgd(weight_decay=0.0, momentum=0.9): the lr holds for that optimizer" in out
    assert out.rstrip().endswith("(the first param group's)")


def test_one_writer_per_run_directory(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    run = tmp_path / "r"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from tune_batch.store.rundir import RunDir\n"
        "with RunDir(sys.argv[2]).lock():\n    print('held', flush=True); time.sleep(60)"),
        str(Path(__file__).resolve().parents[1]), str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match=f"in use by another tune-batch process \\(PID {holder.pid}\\)"):
            with RunDir(run).lock():
                pass
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while True:  # the kernel released the dead holder's lock: nothing stale is left
        try:
            with RunDir(run).lock():
                assert (run / ".lock").read_text() == str(os.getpid())
            break
        except RunDirError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_probe_refuses_a_search_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tune_batch.cli import main

    run = RunDir(tmp_path / "r")
    run.prepare(tiny_config())
    run.append(_rec(0))
    cfg = tmp_path / "c.yaml"
    cfg.write_text((tmp_path / "r" / "config.yaml").read_text())
    before = (tmp_path / "r" / "config.yaml").read_text()
    assert main(["probe", str(cfg), "--batch-size", "16", "--lr", "0.01", "--output", str(run.path)]) == 2
    assert "holds a search" in capsys.readouterr().err
    assert (tmp_path / "r" / "config.yaml").read_text() == before and len(run.records()[0]) == 1


@pytest.mark.parametrize(("readings", "why"), [
    ([("ok", 0.10), ("ok", 0.11)], "nothing was learned: no config got beyond chance"),
    ([("oom", 0.0), ("oom", 0.0)], "no feasible trial"),
])
def test_export_says_why_nothing_is_recommended(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                readings: list, why: str) -> None:
    """`export` on a search that learned nothing said "(no feasible trial)", whatever the reason."""
    from tune_batch.cli import main

    run = RunDir(tmp_path / "run")
    run.prepare(tiny_config())
    for i, (status, acc) in enumerate(readings):
        run.append(_rec(i, status, sps=100.0 * (i + 1), acc=acc, b=16 * (i + 1)))
    assert main(["export", str(run.path), "--to", "keras"]) == 2
    assert capsys.readouterr().err == (f"tune-batch: error: run_dir {str(run.path)!r}: nothing is recommended ({why}); "
                                       f"nothing to export\n")


def test_a_reader_of_the_reports_never_sees_half_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pareto.json, results.csv and report.html were rewritten in place: a script or dashboard
    reading one while `report` (or a search's end) wrote it read a truncated file. Now each is
    written beside and renamed over the old one."""
    import threading

    from tune_batch.cli import main

    run = RunDir(tmp_path / "run")
    run.prepare(tiny_config())
    for i in range(60):
        run.append(_rec(i, sps=100.0 + i, acc=0.3 + i / 100, b=16 * (1 + i % 4)))
    assert main(["report", str(run.path)]) == 0
    rows = len((run.path / "results.csv").read_text().splitlines())
    bad: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                json.loads((run.path / "pareto.json").read_text())
            except ValueError as e:
                bad.append(f"pareto.json: {e}")
            if len((run.path / "results.csv").read_text().splitlines()) != rows:
                bad.append("results.csv: a part of it")
            if not (run.path / "report.html").read_text().rstrip().endswith("</html>"):
                bad.append("report.html: a part of it")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(5):
            assert main(["report", str(run.path)]) == 0
    finally:
        done.set()
        reader.join()
    capsys.readouterr()
    assert not bad, bad[:3]
    assert not [p.name for p in run.path.iterdir() if p.name.endswith(".tmp")]  # nothing left beside them
