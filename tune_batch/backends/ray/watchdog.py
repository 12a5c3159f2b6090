"""The one watchdog: run a function in a thread and stop waiting after a deadline.

A trial checks its own deadline between steps; a step that never returns (a hung data loader,
a deadlock) is caught here (a worker group has its own, in ``group.run_group``). The thread cannot be killed:
the caller ends the process that holds it (raising in a Tune trial makes Ray discard it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """``hung``: still running at the deadline. Otherwise ``value`` or ``error``."""

    hung: bool
    value: T | None = None
    error: BaseException | None = None


def seconds_from_env(name: str, default: float) -> float:
    """A watchdog's allowance in seconds: ``default``, or the environment variable ``name`` where
    it holds a number (the tests shorten them); never below 0."""
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


HANG_GRACE_S = 10.0  # beyond budget.trial_timeout_s before a trial whose step never returns is stopped


def hang_grace_s() -> float:
    """``HANG_GRACE_S``, or ``TUNE_BATCH_HANG_GRACE_S`` (the tests shorten it)."""
    return seconds_from_env("TUNE_BATCH_HANG_GRACE_S", HANG_GRACE_S)


def run_with_watchdog(fn: Callable[[], T], limit_s: float, name: str) -> Outcome[T]:
    """``fn()`` in a thread, given ``limit_s`` seconds."""
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        return Outcome(True)
    return Outcome(False, box.get("value"), box.get("error"))  # type: ignore[arg-type]
