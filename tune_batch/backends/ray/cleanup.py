"""Worker-group reservations orphaned by a trial process that was ended, found and released;
and the temp dirs (and Ray processes) a killed search left behind, swept at the next start."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import time
from typing import Any

import ray
from ray import tune

log = logging.getLogger("tune_batch")


def release_orphaned_groups() -> list[str]:
    """Remove the placement groups whose creating actor is dead: the worker group reservation of
    a trial process that was ended while its group ran (``group.run_group`` releases it on every
    path it returns by; an actor's placement group otherwise lives until the job ends). Without
    this sweep the group's CPUs and GPUs stay reserved and the search waits forever. Only this
    job's placement groups are looked at, and one made by a driver (Tune's own) or a detached
    actor is never touched. Uses Ray 2.60's private GCS table (Ray is pinned). Returns the
    removed ids."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    removed = []
    job = ray.get_runtime_context().get_job_id()  # only this search's own: never another job's on a shared cluster
    for raw in state._connect_and_get_accessor().get_placement_group_table():
        pg = gcs_pb2.PlacementGroupTableData.FromString(raw)
        made_by_an_actor = bool(pg.creator_actor_id) and not ray.ActorID(pg.creator_actor_id).is_nil()
        orphaned = (made_by_an_actor and pg.creator_actor_dead and not pg.is_detached
                    and pg.state != gcs_pb2.PlacementGroupTableData.REMOVED
                    and ray.JobID(pg.creator_job_id).hex() == job)
        if not orphaned:
            continue
        pg_id = ray.PlacementGroupID(pg.placement_group_id)
        remove_placement_group(PlacementGroup(pg_id))
        removed.append(pg_id.hex())
    return removed


class GroupSweeper(tune.Callback):
    """On the driver, while data-parallel trials can run: every few seconds, release worker-group
    reservations orphaned by a trial process that was ended."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._last = 0.0
        self._warned = False

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        try:
            for pg in release_orphaned_groups():
                log.warning("released the worker-group reservation %s of a trial process that was ended", pg)
        except Exception as e:  # a sweep that fails must not stop the search; say why once
            if not self._warned:
                self._warned = True
                log.warning("could not check for orphaned worker groups: %s: %s", type(e).__name__, e)


OWNER = "tune_batch.pid"  # in a local session's temp dir: the PID of the search that made it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _processes_naming(path: str) -> list[int]:
    """PIDs of the processes of the session in ``path``: their command line names it (raylet,
    gcs_server), or a file they hold open is in it (Ray's agents retitle themselves, e.g.
    ``ray::DashboardAgent``, but keep their logs under the session dir open)."""
    out = []
    inside = os.path.realpath(path) + os.sep
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    out.append(int(entry))
                    continue
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/fd/{fd}").startswith(inside):
                    out.append(int(entry))
                    break
    return out


def sweep_stale(root: str) -> list[str]:
    """Remove the temp dirs of local sessions whose search process is gone (killed with SIGKILL,
    so it never cleaned up), after stopping any Ray process still running from them. Only dirs
    holding an owner file this user can read are touched. Returns the dirs removed."""
    removed = []
    for name in os.listdir(root) if os.path.isdir(root) else []:
        path = os.path.join(root, name)
        if not name.startswith("tb-") or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, OWNER), encoding="ascii") as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid):
            continue
        for leftover in _processes_naming(path):
            with contextlib.suppress(OSError):
                os.kill(leftover, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
