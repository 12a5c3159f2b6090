"""Python callables given to the config directly (notebooks): registered here by name, so that
the config holds a string (``callable:<module>.<qualname>``) and ``workload.resolve`` finds the
function again; Ray trials get a copy (``registered``, then ``install`` in the trial's process).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tune_batch.errors import WorkloadError

CALLABLE_PREFIX = "callable:"
_CALLABLES: dict[str, Callable[..., Any]] = {}


def register(fn: Callable[..., Any]) -> str:
    """Keep ``fn`` for this process (and the Ray trials it starts); returns the config string
    that names it."""
    if not callable(fn):
        raise WorkloadError(f"{fn!r} is not callable")
    spec = f"{CALLABLE_PREFIX}{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    _CALLABLES[spec] = fn
    return spec


def registered() -> dict[str, Callable[..., Any]]:
    """The callables registered in this process (what a Ray trial must install)."""
    return dict(_CALLABLES)


def install(callables: dict[str, Callable[..., Any]] | None) -> None:
    """Register callables shipped from the driver (in a Ray trial's process)."""
    _CALLABLES.update(callables or {})


def lookup(spec: str) -> Callable[..., Any] | None:
    """The callable registered under ``spec`` in this process, or None."""
    return _CALLABLES.get(spec)
