"""The run directory, the source of truth of a search.

``config.yaml`` (resolved), ``trials.jsonl`` (one JSON object per finished trial, appended,
flushed and fsynced as the trial ends), ``study.db`` (Optuna sqlite), and the reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tune_batch.config import Config, config_from_dict, dump_config
from tune_batch.errors import RecordNotWritten, RunDirError
from tune_batch.store.records import Status, TrialResult

CONFIG_FILE = "config.yaml"
TRIALS_FILE = "trials.jsonl"
STUDY_FILE = "study.db"
LOCK_FILE = ".lock"
WALL_FILE = "search_time.json"  # the search's wall seconds over every invocation (the baseline's pay-back)

# keys that may change when a search is continued: they do not change what a trial measures
RESUMABLE_KEYS = ("budget.trials", "search.address", "repeats.candidates", "repeats.seeds", "search.log_to",
                  "search.tracking_uri", "baseline", "baseline.batch_size", "baseline.lr", "baseline.num_gpus")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two config dicts (ignoring RESUMABLE_KEYS)."""
    a, b = _flatten(old), _flatten(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in RESUMABLE_KEYS)


def load_records(path: Path) -> tuple[list[TrialResult], list[str]]:
    """Records of a trials.jsonl, and warnings for lines that are not trial records (a line cut
    by a crash or power loss, a foreign object): each is reported and skipped, never fatal."""
    records: list[TrialResult] = []
    warnings: list[str] = []
    if not path.exists():
        return records, warnings
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                result = _parse(line)
            except ValueError as e:
                warnings.append(f"{path.name} line {lineno} is broken and was ignored ({e})")
                continue
            bad = _non_finite(result)
            if bad:  # a measured trial never writes one (a NaN loss is `diverged`): edited or damaged
                result = dataclasses.replace(result, status=Status.FAILED,
                                             reason=f"read back with non-finite {', '.join(bad)}: not a measurement")
                warnings.append(f"{path.name} line {lineno}: trial {result.trial_id} is `ok` with non-finite "
                                f"{', '.join(bad)}; read as failed (not on the front, not in the hypervolume)")
            records.append(result)
    return records, warnings


def _parse(line: str) -> TrialResult:
    """One line of trials.jsonl as a record; ValueError when it is not one."""
    rec = json.loads(line)
    if not isinstance(rec, dict):
        raise ValueError("not an object")
    return TrialResult.from_record(rec)


def set_aside_broken(path: Path) -> list[str]:
    """Move the lines of ``path`` that are not records (a line cut by a crash) to
    ``<path>.broken`` (appended), and keep every whole line, byte for byte, in ``path`` (written
    to a temporary file, fsynced, then renamed over it). Returns one note per line moved."""
    if not path.exists():
        return []
    lines = path.read_bytes().splitlines(keepends=True)
    keep: list[bytes] = []
    broken: list[tuple[int, bytes]] = []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            _parse(raw.decode("utf-8", errors="replace"))
        except ValueError:
            broken.append((lineno, raw))
            continue
        keep.append(raw if raw.endswith(b"\n") else raw + b"\n")
    if not broken:
        return []
    aside = path.with_name(path.name + ".broken")
    with aside.open("ab") as f:
        f.write(b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in broken))
        f.flush()
        os.fsync(f.fileno())
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(b"".join(keep))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return [f"{path.name} line {lineno} was not a whole record (cut by a crash?): moved to {aside.name}; "
            f"its trial or run is measured again" for lineno, _ in broken]


def _non_finite(result: TrialResult) -> list[str]:
    """Names of the numeric metrics of an ``ok`` record that are NaN or infinite."""
    if result.status is not Status.OK:
        return []
    return sorted(k for k, v in result.metrics.to_dict().items()
                  if isinstance(v, float) and not math.isfinite(v))


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a reader sees the old file or the new one,
    never a part of it (it is written beside, then renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class RunDir:
    """One search's directory. Appends are thread-safe and durable (flush + fsync)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # Ray pickles callbacks: a lock cannot travel
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def trials_path(self) -> Path:
        return self.path / TRIALS_FILE

    @property
    def study_path(self) -> Path:
        return self.path / STUDY_FILE

    @property
    def study_url(self) -> str:
        return f"sqlite:///{self.study_path.resolve()}"

    def exists(self) -> bool:
        return self.config_path.exists()

    def has_records(self) -> bool:
        return self.trials_path.exists() and self.trials_path.stat().st_size > 0

    def discard_unused(self) -> None:
        """Remove the directory where it holds no record and only what preparing a search writes
        (config.yaml, an empty trials.jsonl, search_time.json, study.db, the lock): a search that
        recorded nothing leaves nothing behind."""
        prepared = {LOCK_FILE, CONFIG_FILE, "search_time.json", "study.db", "trials.jsonl"}
        if (not self.has_records() and self.path.is_dir()
                and {p.name for p in self.path.iterdir()} <= prepared):
            shutil.rmtree(self.path, ignore_errors=True)

    @staticmethod
    def check_writable(path: Path) -> None:
        """Raise RunDirError unless ``path`` can be created and written (creates nothing)."""
        if not str(path).strip() or str(path) == ".":
            raise RunDirError(f"--output {str(path)!r}: give a directory for the run (a new or empty one, or a run "
                              f"directory to continue)")
        probe = path
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise RunDirError(f"--output {str(path)!r}: {str(probe)!r} is a file, not a directory")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise RunDirError(f"--output {str(path)!r}: {str(probe)!r} is not writable; choose another directory")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the directory for this process: one writer at a time (a search or a probe). A
        second one is refused with RunDirError naming the holder's PID. The lock is the
        kernel's (``flock``): it goes with the holder, so a killed search leaves none behind.
        Creates the directory when it does not exist; a foreign non-empty one is refused first."""
        self.check_writable(self.path)
        self._check_not_foreign()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunDirError(f"--output {str(self.path)!r} cannot be created or written ({e.strerror}); "
                              f"choose another directory") from e
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                raise RunDirError(f"--output {str(self.path)!r} is in use by another tune-batch process (PID "
                                  f"{holder}); wait for it to end, or use another --output") from e
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _check_not_foreign(self) -> None:
        """RunDirError for an existing non-empty directory that is not a run directory (the
        user's files are never written into)."""
        if self.path.exists() and not self.exists() and any(p.name != LOCK_FILE for p in self.path.iterdir()):
            raise RunDirError(f"--output {str(self.path)!r} exists and is not a tune_batch run directory "
                              f"(no {CONFIG_FILE}); choose an empty or new directory")

    def prepare(self, config: Config, *, force: bool = False) -> bool:
        """Create the directory and write config.yaml, or check it matches on resume.

        Returns True when an existing search is being continued. Raises RunDirError when the
        directory belongs to a different config (unless ``force``) or cannot be written.
        """
        self.check_writable(self.path)
        if self.exists():
            try:
                old = yaml.safe_load(self.config_path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as e:
                raise RunDirError(f"{self.config_path} cannot be read ({e}); use a new --output") from e
            diff = config_diff(old, config.to_dict())
            if diff and not force:
                shown = ", ".join(diff[:6]) + (" ..." if len(diff) > 6 else "")
                raise RunDirError(
                    f"--output {str(self.path)!r} holds a search with a different config ({shown} differ); "
                    f"use a new --output, or --force to continue it with the new config"
                )
            if diff or old != config.to_dict():
                replace_file(self.config_path, dump_config(config))
            return True
        self._check_not_foreign()
        self.path.mkdir(parents=True, exist_ok=True)
        replace_file(self.config_path, dump_config(config))
        return False

    def load_config(self) -> Config:
        """The run's resolved config; RunDirError when it cannot be read as one."""
        try:
            raw = yaml.safe_load(self.config_path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise RunDirError(f"{self.config_path} cannot be read ({type(e).__name__}); "
                              f"it is not a run's config") from e
        if not isinstance(raw, dict):
            raise RunDirError(f"{self.config_path} is not a run's config (a {type(raw).__name__})")
        return config_from_dict(raw, source=str(self.config_path))

    def append(self, result: TrialResult) -> None:
        """Append one record as a JSON line, flushed and fsynced before returning. It starts on a
        fresh line whatever the file ends with (a line cut by a crash stays on its own)."""
        line = json.dumps(result.to_record(), default=_json_default, allow_nan=True) + "\n"
        with self._lock:
            try:
                with self.trials_path.open("a+b") as f:
                    f.seek(0, os.SEEK_END)
                    if f.tell() > 0:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) != b"\n":
                            line = "\n" + line
                    f.write(line.encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:  # disk full, file made read-only or replaced: stop, keep this record elsewhere
                kept = self._rescue(line.lstrip("\n"))
                raise RecordNotWritten(
                    f"{self.trials_path} cannot be appended to ({e.strerror or e}): the search stops; the record of "
                    f"trial {result.trial_id} was saved to {kept}, every earlier record is in trials.jsonl (fix the "
                    f"cause, copy that line into trials.jsonl, and run the same command again to continue)") from e

    def _rescue(self, line: str) -> str:
        """Append ``line`` to a rescue file in the system temp dir; where even that fails, to
        stderr. Returns where it went."""
        import sys
        import tempfile

        path = Path(tempfile.gettempdir()) / f"tune_batch-rescue-{self.path.name}-{os.getpid()}.jsonl"
        try:
            with path.open("a", encoding="utf-8") as f:
                f.write(line)
            return str(path)
        except OSError:
            sys.stderr.write(line)
            return "stderr (above)"

    def check_appendable(self) -> None:
        """RunDirError unless records can be appended to trials.jsonl (an immutable or read-only
        file would otherwise fail only after the first trial was measured)."""
        try:
            with self.trials_path.open("ab"):
                pass
        except OSError as e:
            raise RunDirError(f"{self.trials_path} cannot be appended to ({e.strerror}); fix its permissions or use "
                              f"another --output") from e

    def set_aside_broken(self) -> list[str]:
        """Lines of trials.jsonl that are not records moved to trials.jsonl.broken (see
        :func:`set_aside_broken`); one note per line."""
        with self._lock:
            return set_aside_broken(self.trials_path)

    @property
    def wall_path(self) -> Path:
        return self.path / WALL_FILE

    def _wall(self) -> dict[str, Any]:
        try:
            data = json.loads(self.wall_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def search_wall_s(self) -> float | None:
        """The wall seconds every invocation of the search on this directory took, start-up
        included (None when none was recorded)."""
        try:
            return float(self._wall()["wall_s"])
        except (KeyError, TypeError, ValueError):
            return None

    def open_search(self, started_at: float) -> str | None:
        """Mark an invocation that will run something as running since ``started_at`` (epoch
        seconds), under the directory's lock. A mark left by an earlier invocation says it ended
        without adding its time (killed): its seconds from its start to its last record (the
        records file's last write) are added now, a lower bound; returns a note saying so."""
        data, note = self._wall(), None
        since = data.get("running_since")
        if isinstance(since, int | float):
            try:
                lost = max(0.0, self.trials_path.stat().st_mtime - since)
            except OSError:
                lost = 0.0
            data["wall_s"] = float(data.get("wall_s") or 0.0) + lost
            note = (f"an earlier invocation of this search ended without adding its time (killed?): {lost:.0f} s, "
                    f"from its start to its last record, added to the search's cost")
        data["running_since"] = started_at
        replace_file(self.wall_path, json.dumps(data))
        return note

    def add_search_wall_s(self, seconds: float) -> float:
        """Add one invocation's wall seconds to the directory's total (and clear its running
        mark); returns the total."""
        total = (self.search_wall_s() or 0.0) + seconds
        replace_file(self.wall_path, json.dumps({"wall_s": total}))
        return total

    def records(self) -> tuple[list[TrialResult], list[str]]:
        return load_records(self.trials_path)


def _json_default(o: Any) -> Any:
    """numpy / torch scalars as numbers; anything else (paths, devices) as text."""
    return o.item() if hasattr(o, "item") else str(o)
