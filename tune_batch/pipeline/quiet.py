"""Process-wide settings a search changes to keep the terminal readable, restored afterwards.

Nothing is set at import time; :func:`quiet_libraries` changes logger levels, warning filters
and environment variables only for its duration (a notebook keeps its own settings).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

#: Loggers quietened to errors: Ray's, Optuna's (its per-trial INFO lines, and a WARNING with the
#: params of every failed trial, which the progress line and the record already give), and torch's
#: C++-extension one (a compiled model on a machine without CUDA said "No CUDA runtime is found").
LOGGERS = {"ray": logging.ERROR, "ray.tune": logging.ERROR, "ray.train": logging.ERROR, "optuna": logging.ERROR,
           "torch.utils.cpp_extension": logging.ERROR}
#: The legacy Tune reporter honours verbose=0; the new one prints tables regardless.
ENV = {"RAY_AIR_NEW_OUTPUT": "0"}
#: Set only where the user has not: Ray Tune's traceback of every failed trial task (a trial the
#: watchdog stopped, a killed trial process: 30-40 lines each), read once per Tuner; the progress
#: line already says what failed, in one line, and the record keeps the reason.
ENV_DEFAULTS = {"TUNE_PRINT_ALL_TRIAL_ERRORS": "0"}


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False) -> Iterator[None]:
    """Ray's and Optuna's own logging kept to what matters, unless ``verbose``; everything is
    put back on exit, exceptions included."""
    if verbose:
        yield
        return
    levels = {name: logging.getLogger(name).level for name in LOGGERS}
    env = {key: os.environ.get(key) for key in [*ENV, *ENV_DEFAULTS]}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module="ray")
            for name, level in LOGGERS.items():
                logging.getLogger(name).setLevel(level)
            os.environ.update(ENV)
            for key, value in ENV_DEFAULTS.items():
                os.environ.setdefault(key, value)
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def environment_restored() -> Iterator[None]:
    """``os.environ`` as it was on entry, on exit: variables set meanwhile (by tune_batch, or by a
    library as a side effect, e.g. torch's TORCHINDUCTOR_CACHE_DIR) are removed, changed ones
    put back."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            os.environ.pop(key, None)
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
