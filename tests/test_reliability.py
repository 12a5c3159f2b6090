"""What a killed or continued search leaves behind: stale temp dirs and Ray processes swept at
the next start; a continued search does not re-propose the points it already measured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tune_batch.analysis.notes import texts
from tune_batch.backends.ray.cleanup import OWNER, sweep_stale
from tune_batch.pipeline.search import search


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _wait_for(pred, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_stale_session_dirs_and_their_processes_are_swept(tmp_path: Path) -> None:
    stale, live, foreign = tmp_path / "tb-stale", tmp_path / "tb-live", tmp_path / "tb-foreign"
    for d in (stale, live, foreign):
        d.mkdir()
    (stale / OWNER).write_text(str(_dead_pid()))
    (live / OWNER).write_text(str(os.getpid()))  # this process: alive
    # a leftover process of the stale session (its command line names the session dir)
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(stale / "session")])
    # and one like Ray's agents, which retitle themselves (ray::DashboardAgent): its command line
    # names nothing, but it holds its log open under the session dir
    (stale / "logs").mkdir()
    agent = subprocess.Popen([sys.executable, "-c",
                              "import os, time; f = open(os.environ['LOG'], 'w'); time.sleep(120)"],
                             env={**os.environ, "LOG": str(stale / "logs" / "agent.log")})
    try:
        assert _wait_for(lambda: (stale / "logs" / "agent.log").exists())
        removed = sweep_stale(str(tmp_path))
        assert removed == [str(stale)]
        assert not stale.exists() and live.exists() and foreign.exists()  # no owner file: not ours to touch
        assert leftover.wait(timeout=10) != 0 and agent.wait(timeout=10) != 0  # both killed
    finally:
        for p in (leftover, agent):
            if p.poll() is None:
                p.kill()


@pytest.mark.slow
def test_a_continued_search_does_not_repropose_measured_points(tmp_path: Path) -> None:
    cfg = tiny_config(search={"backend": "optuna", "sampler": "random", "seed": 0}, budget={"trials": 2})
    search(cfg, tmp_path / "run", quiet=True)
    more = tiny_config(search={"backend": "optuna", "sampler": "random", "seed": 0}, budget={"trials": 4})
    search(more, tmp_path / "run", quiet=True)
    recs = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    points = [(r["params"]["batch_size"], r["params"]["lr"]) for r in recs]
    assert len(points) == 4 and len(set(points)) == 4, points


def test_device_util_without_nvml_is_refused_before_anything_runs(monkeypatch) -> None:
    import pytest

    from tune_batch.errors import ConfigError, DeviceMonitorError
    from tune_batch.measure import nvml
    from tune_batch.pipeline.search import check_device_util

    def broken(indices):
        raise DeviceMonitorError("NVML could not open the trial's GPUs [0]: Driver Not Loaded")

    monkeypatch.setattr(nvml, "NvmlReader", broken)  # the hardware we lack: NVML on a GPU machine
    cfg = tiny_config(objectives=[{"metric": "samples_per_s"}, {"metric": "device_util"}])
    with pytest.raises(ConfigError, match="device_util is read through NVML, which does not work here.*Driver Not "
                                          "Loaded.*objectives=\\[\\{metric: samples_per_s\\}\\]"):
        check_device_util(cfg, gpus=1)
    check_device_util(cfg, gpus=0)  # a CPU: device_util is the CPU's, no NVML needed
    check_device_util(tiny_config(objectives=[{"metric": "samples_per_s"}]), gpus=1)


def test_an_ok_trial_missing_an_objective_is_not_told_as_a_bad_point() -> None:
    from tune_batch.analysis.report import build_report
    from tune_batch.store.records import TrialResult
    from tune_batch.study import seam

    cfg = tiny_config(objectives=[{"metric": "samples_per_s"}, {"metric": "device_util"}])
    rec = TrialResult.from_record({"trial_id": 0, "params": {"batch_size": 16, "lr": 0.01, "num_gpus": 1},
                                   "status": "ok", "metrics": {"samples_per_s": 100.0},
                                   "info": {"device_util_note":
                                            "NVML read failed during the window after 0 sample(s)"}})
    assert seam.answer(cfg, rec) is None  # a FAIL for Optuna, not a 0.0
    report = build_report(cfg, [rec])
    assert any("1 ok trial(s) lack an objective (device_util: NVML read failed" in n for n in texts(report.notes))


def _tree(root: int) -> set[int]:
    """``root`` and every process descended from it (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in tree and p not in tree}
        tree |= more
        grew = bool(more)
    return tree


def _listeners(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process) of every TCP listener owned by ``pids`` (ss -ltnp)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        owners = [int(p) for p in re.findall(r"pid=(\d+)", line)]
        if any(p in pids for p in owners):
            found.append((parts[3], line.split("users:")[-1][:60]))
    return found


@pytest.mark.parametrize("backend", ["optuna", pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.slow])])
def test_a_record_that_cannot_be_written_stops_the_search_and_is_kept(tmp_path: Path, backend: str) -> None:
    from tune_batch.errors import RecordNotWritten
    from tune_batch.pipeline.search import search

    run = tmp_path / "run"
    cfg = tiny_config(model={"name": "tests.workloads:swaps_records_away", "kwargs": {"run_dir": str(run)}},
                      search={"backend": backend}, budget={"trials": 4, "train_samples": 256},
                      space={"batch_size": [16, 32]})
    with pytest.raises(RecordNotWritten) as err:
        search(cfg, run, quiet=True)
    msg = str(err.value)
    assert "\n" not in msg and "the search stops" in msg and "cannot be appended to" in msg
    kept = Path(re.search(r"was saved to (\S+),", msg).group(1))
    rescued = [json.loads(x) for x in kept.read_text().splitlines()]
    before = [json.loads(x) for x in (run / "trials.jsonl.kept").read_text().splitlines()]
    assert len(before) == 1 and before[0]["status"] == "ok"  # measured before the fault: still there
    assert rescued and all(r["status"] == "ok" for r in rescued)  # measured after it: kept, not lost
    assert len(before) + len(rescued) < 4  # stopped: not every trial of the budget ran
    kept.unlink()
