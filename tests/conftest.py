from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tune_batch.config import Config, config_from_dict

REPO = Path(__file__).resolve().parents[1]


def tiny_config(**sections: dict) -> Config:
    """A config that trains in about a second on this CPU: small_cnn (width 8) on digits at 16 px."""
    raw: dict = {
        "name": "t",
        "model": {"name": "small_cnn", "kwargs": {"width": 8}},
        "data": {"name": "digits", "resize": 16, "val_samples": 300},
        "space": {"batch_size": {"min": 16, "max": 64}, "lr": {"low": 0.01, "high": 0.1}},
        # no window extension on the CPU (tested on its own in test_trial); on a GPU these
        # windows last milliseconds, shorter than NVML's sample period, so keep a short one
        "budget": {"trials": 4, "train_samples": 1024, "warmup_steps": 2, "trial_timeout_s": 120,
                   "min_window_s": 1.0 if torch.cuda.is_available() else 0},
        "search": {"seed": 0},
        # a fixed MFU peak: measuring it costs seconds in every fresh trial process; the
        # measured path has its own tests (test_measure) and runs in the quickstart test
        "resources": {"peak_flops": 100e9},
        # no repeats of front candidates unless a test asks (test_noise does)
        "repeats": {"seeds": 0},
        # no confirmation at length unless a test asks (test_confirm does)
        "confirm": {"candidates": 0},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return config_from_dict(raw)


@contextmanager
def script(name: str) -> Iterator[ModuleType]:
    """A benchmark script of scripts/ imported as a module (scripts/ on sys.path meanwhile: the
    scripts import each other by name)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "scripts"))


def sigint_default() -> None:
    """``preexec_fn`` for a command a test stops with SIGINT: SIGINT at its default in the child, as
    for a command typed at a terminal, also where the tests run in a script's background job
    (which ignores SIGINT, and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sigint_ignored() -> None:
    """``preexec_fn`` for a command started as a script's background job (`cmd &`): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def tiny() -> Config:
    return tiny_config()


@pytest.fixture(autouse=True)
def _no_home_writes(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # runs are written where tests say, never under the repo's runs/ or the user's home
    monkeypatch.setenv("TUNE_BATCH_TEST", "1")
    os.environ.setdefault("PYTHONHASHSEED", "0")
