"""Trial faults, and the one rule that turns an exception into a status and a reason."""

from __future__ import annotations

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
