"""Trial faults, and the one rule that turns an exception into a status and a reason."""

from __future__ import annotations

import re
import traceback as tb

from tune_batch.errors import CONFIG_FAULT, TrialConfigError
from tune_batch.measure.oom import is_oom_error
from tune_batch.store.records import Status


class TrialTimeout(RuntimeError):
    """The trial ran past ``budget.trial_timeout_s``."""


class NonFiniteError(RuntimeError):
    """The loss or a BatchNorm running statistic became NaN or infinite."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc)
    return text.splitlines()[0][:limit] if text else ""


def inner_errors(exc: BaseException) -> list[BaseException]:
    """The exception and everything inside it: causes, and the workers' own exceptions of a
    group's failure (``group.GroupError.worker_failures``)."""
    found: list[BaseException] = []
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        found.append(e)
        wf = getattr(e, "worker_failures", None)
        if isinstance(wf, dict):
            stack.extend(v for v in wf.values() if isinstance(v, BaseException))
        for attr in ("cause", "__cause__", "__context__"):
            inner = getattr(e, attr, None)
            if isinstance(inner, BaseException):
                stack.append(inner)
    return found


#: What Ray's memory monitor says when it kills a worker for the node's (host) memory
_MONITOR_KILL = "killed due to the node running low on memory"
_NODE_USE = re.compile(r"was ([\d.]+ ?[KMGT]?B) used / ([\d.]+ ?[KMGT]?B) limit")  # Ray 2.5x-2.60
_NODE_USE_OLD = re.compile(r"was running was ([\d.]+ ?[KMGT]?B) / ([\d.]+ ?[KMGT]?B)")  # earlier Ray
_THRESHOLD = re.compile(r"exceeded threshold of \d+B \(([\d.]+%) of|exceeds the memory usage threshold of ([\d.]+)")
_KILLED_USE = re.compile(r"Selected to kill:.*?actual memory used=([\d.]+ ?[KMGT]?B)", re.DOTALL)


def memory_monitor_reason(text: str) -> str | None:
    """One line for a trial whose process Ray's memory monitor killed (the node's memory over
    ``RAY_memory_usage_threshold``), from Ray's message; None for any other error. Host memory,
    not the device's; Ray picks the most recently started task, not always the one that grew, so
    the record stays ``failed`` rather than ``oom`` (which would teach the feasibility model a
    batch-size limit)."""
    if _MONITOR_KILL not in text:
        return None
    use = _NODE_USE.search(text) or _NODE_USE_OLD.search(text)
    limit = _THRESHOLD.search(text)
    own = _KILLED_USE.search(text)
    said = "killed by Ray's memory monitor (host memory)"
    if use:
        said += f": the node used {use.group(1)} of {use.group(2)}"
    if limit:
        said += f", over its threshold ({limit.group(1) + ' of the limit' if limit.group(1) else limit.group(2)})"
    if own:
        said += f"; this trial's process used {own.group(1)}"
    return (said + "; Ray kills the most recently started task, not always the one that used the memory "
            "(RAY_memory_usage_threshold sets the threshold; fewer concurrent trials or a smaller batch use less)")


def classify(exc: BaseException) -> tuple[Status, str, str | None]:
    """(status, one-line reason, traceback or None) of a trial that raised ``exc``: ``diverged``
    for a non-finite loss, ``oom`` for what :func:`is_oom_error` accepts, ``failed`` for
    everything else (timeouts and config mistakes without a traceback: their reason says it all;
    a config mistake's begins with ``CONFIG_FAULT``)."""
    if isinstance(exc, NonFiniteError):
        return Status.DIVERGED, first_line(exc), None
    if isinstance(exc, TrialTimeout):
        return Status.FAILED, first_line(exc), None
    if isinstance(exc, TrialConfigError):
        return Status.FAILED, CONFIG_FAULT + first_line(exc), None
    if is_oom_error(exc):
        return Status.OOM, f"{type(exc).__name__}: {first_line(exc)}", None
    trace = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    return Status.FAILED, f"{type(exc).__name__}: {first_line(exc)}", trace
