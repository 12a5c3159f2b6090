"""Every case of the reliability issue, made to happen from the command line as a user meets it,
and what happened: the exit code, the line the user reads, what the run directory kept.

Each case runs the real `python -m tune_batch` in a subprocess (real local Ray, real sqlite
study, real training of a tiny CNN on the digits), against a scratch directory, one case at a
time. A case passes when what happened is what docs/faults.md documents; the table says which
did not. NVML on a GPU machine cannot be made to fail here (no GPU): those rows name the tests
that mock it. About 4-5 minutes on 2 cores; do not run it beside a benchmark.

    python scripts/fault_matrix.py [--keep DIR] [--only 3,9]

Ends with ``RESULT cases=N as_documented=M``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
# a search that trains for a second or two per trial: no repeats, no confirmation, no window extension
SMALL = {"model": {"name": "small_cnn", "num_classes": 10, "kwargs": {"width": 8}},
         "data": {"name": "digits", "resize": 16, "val_samples": 300, "num_workers": 0},
         "space": {"batch_size": {"min": 16, "max": 64}, "lr": {"low": 0.01, "high": 0.1}, "num_gpus": [1]},
         "objectives": [{"metric": "samples_per_s"}, {"metric": "val_acc"}],
         "budget": {"trials": 3, "train_samples": 256, "warmup_steps": 2, "min_window_s": 0, "trial_timeout_s": 120},
         "resources": {"peak_flops": 1e11}, "repeats": {"seeds": 0}, "confirm": {"candidates": 0},
         "search": {"backend": "ray", "sampler": "random", "seed": 0}}


@dataclass
class Ran:
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def line(self) -> str:
        """The last line the user reads on stderr (or stdout when stderr is empty)."""
        lines = [x for x in (self.err or self.out).strip().splitlines() if x.strip()]
        return lines[-1].strip() if lines else ""

    @property
    def one_clean_line(self) -> bool:
        return len([x for x in self.err.strip().splitlines() if x.strip()]) == 1 and "Traceback" not in self.err


@dataclass
class Row:
    case: str
    expected: str
    observed: str
    ok: bool


def tb(*argv: str, env: dict | None = None, timeout: float = 300, cwd: Path | None = None) -> Ran:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tune_batch", *argv], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})}, cwd=cwd)
    return Ran(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)


def popen(*argv: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tune_batch", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})}, start_new_session=True)


def records(run: Path) -> list[dict]:
    """Whole JSON lines of trials.jsonl that are trial records."""
    out = []
    path = run / "trials.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "params" in rec and "status" in rec:
            out.append(rec)
    return out


def searched(run: Path) -> list[dict]:
    return [r for r in records(run) if not r.get("info", {}).get("repeat_of")
            and not r.get("info", {}).get("confirm_of") and not r.get("info", {}).get("free_skip")]


def wait_for(pred: Callable[[], bool], timeout: float, every: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(every)
    return False


def short(text: str, n: int = 150) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Matrix:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.rows: list[Row] = []
        self.config = root / "small.yaml"
        self.config.write_text(yaml.safe_dump(SMALL))

    def add(self, case: str, expected: str, observed: str, ok: bool) -> None:
        self.rows.append(Row(case, expected, observed, ok))
        print(f"[{'ok ' if ok else 'BAD'}] {case}: {observed}", flush=True)

    def refused(self, case: str, argv: list[str], words: str, nothing_at: Path | None = None,
                within_s: float = 60.0, env: dict | None = None, cwd: Path | None = None) -> None:
        """A user mistake: one line naming it, exit 2, nothing written, within ``within_s``."""
        r = tb(*argv, env=env, timeout=within_s + 60, cwd=cwd)
        written = nothing_at is not None and nothing_at.exists()
        ok = r.rc == 2 and r.one_clean_line and words in r.err and not written and r.seconds < within_s
        self.add(case, "one line, exit 2, nothing written",
                 f"rc {r.rc} in {r.seconds:.1f} s, {'WROTE ' + str(nothing_at) if written else 'nothing written'}: "
                 f"{short(r.line)}", ok)

    # -- exposure ---------------------------------------------------------------------------------------------
    def loopback(self) -> None:
        if shutil.which("ss") is None:
            self.add("1 listeners of a local search", "every listener of its process tree on 127.0.0.1",
                     "NOT CHECKED: `ss` (iproute2) is not installed", False)
            return
        run = self.root / "loopback"
        p = popen("search", str(self.config), "--output", str(run), "--quiet")
        seen: dict[str, str] = {}
        try:
            while p.poll() is None:
                tree = {p.pid} | {c.pid for c in _children(p.pid)}
                for addr, who in _listeners(tree):
                    seen.setdefault(addr, who)
                time.sleep(0.3)
        finally:
            out, err = p.communicate()
        hosts = {a.rsplit(":", 1)[0] for a in seen}
        bad = sorted(h for h in hosts if h not in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"))
        self.add("1 listeners of a local search", "every listener of its process tree on 127.0.0.1",
                 f"rc {p.returncode}; {len(seen)} listening sockets seen, hosts {sorted(hosts)}"
                 + (f"; NOT LOOPBACK: {bad}" if bad else ""), p.returncode == 0 and len(seen) >= 3 and not bad)

    def sigkill_sweep(self) -> None:
        run = self.root / "killed"
        cfg = _variant(self.root, "killed", budget={"trials": 4, "train_samples": 1024})
        p = popen("search", str(cfg), "--output", str(run), "--quiet")
        got_one = wait_for(lambda: len(records(run)) >= 1, 240)
        session = _session_dirs_of(p.pid)
        # the driver's Ray processes, before the kill
        tree = {c.pid: (_started(c.pid), _name(c)) for c in _children(p.pid)}
        os.kill(p.pid, signal.SIGKILL)  # the driver alone, as kill -9 <pid> does
        p.wait()
        time.sleep(2)
        left = [d for d in session if Path(d).exists()]
        alive = sorted({name for pid, (t, name) in tree.items() if _started(pid) == t})
        before = len(records(run))
        again = tb("search", str(cfg), "--output", str(run), "--quiet", timeout=400)
        recs = searched(run)
        ids = [r["trial_id"] for r in recs]
        still = sorted({name for pid, (t, name) in tree.items() if _started(pid) == t})
        gone = not any(Path(d).exists() for d in session) and not still
        self.add("1 SIGKILL of the driver, then the next search",
                 "stale tb-* dir and its agents swept by the next start; resume loses and duplicates nothing",
                 f"2 s after the kill: {len(left)} session dir(s), Ray processes still up: {alive or 'none'}; next run "
                 f"rc {again.rc}: after it, dir gone {not any(Path(d).exists() for d in session)}, still up: "
                 f"{still or 'none'}; records {before} -> {len(recs)} for a budget of 4, ids {ids}",
                 got_one and again.rc == 0 and gone and len(recs) == 4 and len(set(ids)) == 4)

    # -- records -----------------------------------------------------------------------------------------------
    def cut_line(self) -> None:
        run = self.root / "cut"
        cfg = _variant(self.root, "cut", budget={"trials": 3})
        first = tb("search", str(cfg), "--output", str(run), "--quiet")
        lines = (run / "trials.jsonl").read_text().splitlines(keepends=True)
        cut = lines[-1][: len(lines[-1]) // 2]
        (run / "trials.jsonl").write_text("".join(lines[:-1]) + cut)
        more = _variant(self.root, "cut4", budget={"trials": 4})
        again = tb("search", str(more), "--output", str(run), "--force", "--quiet")
        recs = searched(run)
        whole = all(_is_json(x) for x in (run / "trials.jsonl").read_text().splitlines()[len(lines):])
        said = "is broken and was ignored" in again.out + again.err
        self.add("2 last line of trials.jsonl cut by a crash, then resume (budget 3 -> 4)",
                 "the cut line reported and skipped; new records start on a fresh line; none lost after it",
                 f"rc {first.rc}/{again.rc}; warned: {'yes' if said else 'no'} "
                 f"({short(_first_warning(again.out + again.err), 90)}); "
                 f"whole records after the cut: {len(recs)} of budget 4; later lines whole: {whole}",
                 again.rc == 0 and said and whole and len(recs) == 4)

    def two_writers(self) -> Path:
        run = self.root / "shared"
        first = popen("search", str(self.config), "--output", str(run), "--quiet")
        wait_for(lambda: (run / "config.yaml").exists(), 60)
        time.sleep(1.0)
        second = tb("search", str(self.config), "--output", str(run), "--quiet", timeout=120)
        out, err = first.communicate(timeout=400)
        n = len(searched(run))
        ok = second.rc == 2 and second.one_clean_line and "PID" in second.err and first.returncode == 0 and n == 3
        self.add("3 two searches on one --output, a second apart",
                 "the second refused in one line naming the holder's PID",
                 f"first rc {first.returncode}, {n} records for a budget of 3; second rc {second.rc} in "
                 f"{second.seconds:.1f} s: {short(second.line)}", ok)
        return run

    def lost_study(self, run: Path) -> None:
        (run / "study.db").unlink()
        more = _variant(self.root, "more", budget={"trials": 4})
        r = tb("search", str(more), "--output", str(run), "--force", "--quiet")
        ids = [x["trial_id"] for x in searched(run)]
        self.add("4 study.db deleted, then resume (budget 3 -> 4)",
                 "study rebuilt from trials.jsonl; new trial ids go on after the old ones",
                 f"rc {r.rc}; ids {ids}; {short(_first_warning(r.err + r.out, 'rebuilt'), 100)}",
                 r.rc == 0 and ids == [0, 1, 2, 3])

    def probe_into_search(self, run: Path) -> None:
        before = sha(run / "config.yaml")
        n = len(records(run))
        r = tb("probe", str(self.config), "--batch-size", "32", "--lr", "0.05", "--output", str(run))
        same = sha(run / "config.yaml") == before and len(records(run)) == n
        self.add("5 probe --output <a search's run directory>",
                 "refused in one line; config.yaml and records untouched",
                 f"rc {r.rc}; untouched: {same}: {short(r.line)}", r.rc == 2 and r.one_clean_line and same)

    def junk_lines(self, run: Path) -> None:
        copy = self.root / "junk"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".lock"))
        clean = tb("report", str(copy))
        hv0 = json.loads((copy / "pareto.json").read_text()).get("hypervolume")
        ok_rec = next(r for r in records(copy) if r["status"] == "ok")
        nan = {**ok_rec, "trial_id": 98, "metrics": {**ok_rec["metrics"], "val_acc": float("nan")}}
        with (copy / "trials.jsonl").open("a") as f:
            f.write('{"foo": 1}\n{"trial_id": 99, "status": "ok"}\n{}\n[1, 2]\n')
            f.write(json.dumps(nan) + "\n")  # json.dumps writes NaN
        r = tb("report", str(copy))
        hv1 = json.loads((copy / "pareto.json").read_text()).get("hypervolume")
        front = [p["trial_id"] for p in json.loads((copy / "pareto.json").read_text())["trials"]]  # the front
        ignored = (r.out + r.err).count("is broken and was ignored")
        ok = (clean.rc == 0 and r.rc == 0 and "Traceback" not in r.err and hv0 == hv1 and 98 not in front
              and ignored == 4 and "read as failed" in r.out + r.err)
        self.add("6 lines that are not trials, an ok record with a NaN metric",
                 "reported and skipped; the NaN record not on the front; hypervolume unchanged",
                 f"rc {r.rc}; {ignored} of 4 junk lines reported and ignored; hypervolume {hv0} -> {hv1}; "
                 f"NaN record on the front: {98 in front}; "
                 f"{short(_first_warning(r.err + r.out, 'non-finite'), 130)}", ok)

    def unappendable(self, run: Path) -> None:
        other = self.root / "unappendable"
        other.mkdir()
        shutil.copy(run / "config.yaml", other / "config.yaml")
        (other / "trials.jsonl").mkdir()  # root ignores file modes: a directory cannot be appended to by anyone
        r = tb("search", str(self.config), "--output", str(other), "--force")
        self.add("7 trials.jsonl cannot be appended to", "refused before any trial, one line, exit 2",
                 f"rc {r.rc} in {r.seconds:.1f} s: {short(r.line)}",
                 r.rc == 2 and r.one_clean_line and "appended" in r.err)
        self.add("7 trials.jsonl stops taking appends mid-search",
                 "the search stops, one line, exit 2, the record rescued",
                 "not made to happen here (needs the file swapped under a running search): "
                 "tests/test_reliability.py::test_a_record_that_cannot_be_written_stops_the_search_and_is_kept "
                 "(both backends)",
                 True)

    def nvml(self) -> None:
        self.add("8 NVML cannot be opened / fails in a window (GPU machines)",
                 "refused before anything runs when device_util is an objective; a read error keeps the trial and "
                 "says so",
                 "no GPU on this machine: NVML mocked in tests/test_reliability.py::test_device_util_without_nvml_is_"
                 "refused_before_anything_runs, tests/test_measure.py::test_an_nvml_read_error_in_the_window_keeps_the_"
                 "trial_and_says_so", True)

    # -- signals -----------------------------------------------------------------------------------------------
    def signal_case(self, sig: signal.Signals, code: int, group: bool) -> None:
        name = f"sig{int(sig)}{'group' if group else ''}"
        run = self.root / name
        cfg = _variant(self.root, name, budget={"trials": 4, "train_samples": 1024})
        p = popen("search", str(cfg), "--output", str(run))
        reached = wait_for(lambda: len(records(run)) >= 2, 300)
        t0 = time.monotonic()
        (os.killpg if group else os.kill)(p.pid, sig)
        out, err = p.communicate(timeout=120)
        stop_s = time.monotonic() - t0
        n = len(searched(run))
        said = re.search(r"interrupted after \d+ of \d+[^\n]*", out + err)
        dump = "SIGTERM received" in err or "*** " in err or "Traceback" in err
        again = tb("search", str(cfg), "--output", str(run), "--quiet", timeout=400)
        recs = searched(run)
        points = {(r["params"]["batch_size"], round(r["params"]["lr"], 12)) for r in recs}
        ok = (reached and p.returncode == code and said is not None and not dump and again.rc == 0
              and len(recs) == 4 and len(points) == 4)
        self.add(f"9 {sig.name} to the {'process group' if group else 'driver'} after 2 of 4 trials",
                 f"no new trial, exit {code}, 'interrupted after N of M', no dump; resume runs the rest, "
                 f"no point twice",
                 f"rc {p.returncode} {stop_s:.1f} s after the signal, {n} record(s); "
                 f"'{said.group(0) if said else 'NO MESSAGE'}'; "
                 f"dump: {dump}; resume rc {again.rc}: {len(recs)} records, {len(points)} distinct points", ok)

    # -- bad input ---------------------------------------------------------------------------------------------
    def bad_input(self) -> None:
        d = self.root / "bad"
        d.mkdir()
        bomb = d / "bomb.yaml"
        levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}" + f", *{chr(97 + i)}" * 8 + "]" for i in range(8)]
        bomb.write_text("data:\n  kwargs:\n" + "".join(f"    {x}\n" for x in levels))
        huge = d / "huge.yaml"
        with huge.open("w") as f:
            f.write("data:\n  kwargs:\n    blob: [")
            chunk = ", ".join(["12345678"] * 1000)
            for _ in range(5200):  # ~50 MB
                f.write(chunk + ", ")
            f.write("1]\n")
        self.refused("10 an 8-level YAML alias bomb under data.kwargs: validate", ["validate", str(bomb)], "alias")
        self.refused("10 the same: search", ["search", str(bomb), "--output", str(d / "o10")], "alias", d / "o10")
        t0 = time.monotonic()
        r = tb("validate", str(huge))
        self.add("10 a 50 MB YAML file", "refused by size at once, one line, exit 2",
                 f"rc {r.rc} in {time.monotonic() - t0:.1f} s: {short(r.line)}",
                 r.rc == 2 and r.one_clean_line and r.seconds < 10)
        q = str(self.config)
        self.refused("11 space.num_gpus=[4] on a 2-CPU machine", ["search", q, "--set", "space.num_gpus=[4]", "--set",
                     "space.batch_size.max=256", "--output", str(d / "o11a")], "num_gpus", d / "o11a")
        self.refused("11 --address ray://127.0.0.1:1", ["search", q, "--address", "ray://127.0.0.1:1", "--output",
                     str(d / "o11b")], "nothing answers", d / "o11b", within_s=30)
        self.refused("11 --address 127.0.0.1:1", ["search", q, "--address", "127.0.0.1:1", "--output", str(d / "o11c")],
                     "nothing answers", d / "o11c", within_s=30)
        self.refused("11 --storage notaurl", ["search", q, "--storage", "notaurl", "--study-name", "s", "--output",
                     str(d / "o11d")], "storage", d / "o11d")
        mods = d / "usermods"
        mods.mkdir()
        (mods / "badbuild.py").write_text(
            "def model(num_classes=10, **kwargs):\n    raise RuntimeError('weights file missing')\n\n"
            "def data(**kwargs):\n    raise OSError('no such bucket')\n")
        env = {"PYTHONPATH": f"{mods}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.refused("12 a model builder that raises", ["search", q, "--set", "model.name=badbuild:model", "--output",
                     str(d / "o12a")], "weights file missing", d / "o12a", env=env)
        self.refused("12 a data builder that raises", ["search", q, "--set", "data.name=badbuild:data", "--output",
                     str(d / "o12b")], "no such bucket", d / "o12b", env=env)
        self.refused("12 model.kwargs.bogus=1",
                     ["search", q, "--set", "model.kwargs.bogus=1", "--output", str(d / "o12c")],
                     "bogus", d / "o12c")
        self.refused("12 data.resize=100000", ["search", q, "--set", "data.resize=100000", "--output", str(d / "o12d")],
                     "data.resize", d / "o12d")
        self.refused("12 --output /proc/x", ["search", q, "--output", "/proc/tune-batch-x"], "cannot be created")
        badrun = d / "badrun"
        badrun.mkdir()
        (badrun / "config.yaml").write_text("model: [unclosed")
        self.refused("12 report on a run directory whose config.yaml is invalid", ["report", str(badrun)],
                     "cannot be read")
        self.refused("13 validate model.name=resnet_nope", ["validate", q, "--set", "model.name=resnet_nope"],
                     "resnet_nope")
        self.refused("13 an empty config (/dev/null)", ["search", "/dev/null", "--output", str(d / "o13a")], "empty",
                     d / "o13a")
        self.refused("13 --output ''", ["search", q, "--output", ""], "directory", d / "runs", cwd=d)
        self.refused("13 probe --lr nan",
                     ["probe", q, "--batch-size", "32", "--lr", "nan", "--output", str(d / "o13b")],
                     "lr", d / "o13b")
        self.refused("13 probe --batch-size 5000 (1437 training samples)", ["probe", q, "--batch-size", "5000", "--lr",
                     "0.01", "--output", str(d / "o13c")], "5000", d / "o13c")
        self.refused("13 resources.device_memory=99999999TiB", ["validate", q, "--set",
                     "resources.device_memory=99999999TiB"], "device_memory")
        self.refused("13 resources.device_memory=1B", ["validate", q, "--set", "resources.device_memory=1B"],
                     "device_memory")

    def flaky(self) -> None:
        self.add("14 the two-node test's window",
                 "the data-parallel window meets budget.min_window_s; no timing a load can break",
                 "run by the suite: "
                 "tests/test_distributed.py::test_readme_cluster_recipe_with_ray_start_and_ray_client "
                 "asserts timed_s >= min_window_s (the clock top-up), not a speed", True)


def _variant(root: Path, name: str, **sections: dict) -> Path:
    raw = json.loads(json.dumps(SMALL))
    for k, v in sections.items():
        raw[k] = {**raw.get(k, {}), **v}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _listeners(pids: set[int]) -> list[tuple[str, str]]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.append((line.split()[3], line.split("users:")[-1][:50]))
    return found


def _session_dirs_of(pid: int) -> list[str]:
    """The tb-* session dirs named on the command lines of the search's Ray processes."""
    dirs = set()
    for proc in _children(pid):
        try:
            for arg in proc.cmdline():
                m = re.search(r"(/[^\s=]*/tb-[^/\s]+)", arg)
                if m:
                    dirs.add(m.group(1))
        except psutil.Error:
            pass
    return sorted(dirs)


def _name(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:40] or proc.name()
    except psutil.Error:
        return "?"


def _started(pid: int) -> float | None:
    """A process's start time: with its PID, its identity (a PID can be reused)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def _first_warning(text: str, word: str = "") -> str:
    for line in text.splitlines():
        if (word and word in line.lower()) or (not word and ("warning" in line.lower() or "skip" in line.lower())):
            return line.strip()
    return "(nothing said)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="keep the scratch directories here")
    ap.add_argument("--only", default="", help="comma-separated case numbers, e.g. 3,9")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="faults-"))
    root.mkdir(parents=True, exist_ok=True)
    only = {int(x) for x in args.only.split(",") if x}
    m = Matrix(root)

    def want(n: int) -> bool:
        return not only or n in only

    if want(1):
        m.loopback()
        m.sigkill_sweep()
    if want(2):
        m.cut_line()
    if want(3) or want(4) or want(5) or want(6) or want(7):
        shared = m.two_writers()
        m.lost_study(shared)
        m.probe_into_search(shared)
        m.junk_lines(shared)
        m.unappendable(shared)
    if want(8):
        m.nvml()
    if want(9):
        m.signal_case(signal.SIGINT, 130, group=False)
        m.signal_case(signal.SIGINT, 130, group=True)
        m.signal_case(signal.SIGTERM, 143, group=False)
    if want(10) or want(11) or want(12) or want(13):
        m.bad_input()
    if want(14):
        m.flaky()
    print()
    print("| case | documented outcome | observed | as documented |")
    print("| --- | --- | --- | --- |")
    for r in m.rows:
        print(f"| {r.case} | {r.expected} | {r.observed.replace('|', '/')} | {'yes' if r.ok else 'NO'} |")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"RESULT cases={len(m.rows)} as_documented={sum(r.ok for r in m.rows)}")


if __name__ == "__main__":
    main()
