"""tune_batch: batch size, learning rate and GPU count, searched together.

Heavy dependencies (torch, ray) are imported only where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tune_batch.config import Config, load_config
from tune_batch.errors import ConfigError, TuneBatchError, UserError

__version__ = "0.1.0"

__all__ = ["Config", "ConfigError", "TuneBatchError", "UserError", "load_config", "load_run", "probe", "run_trial",
           "search", "__version__"]

if TYPE_CHECKING:
    from tune_batch.output.frames import load_run
    from tune_batch.pipeline.probe import probe
    from tune_batch.pipeline.search import search
    from tune_batch.trial import run_trial


def __getattr__(name: str) -> Any:
    # lazy: `import tune_batch` must not import torch or ray
    if name == "run_trial":
        from tune_batch.trial import run_trial

        return run_trial
    if name == "load_run":
        from tune_batch.output.frames import load_run

        return load_run
    if name == "search":
        from tune_batch.pipeline.search import search

        return search
    if name == "probe":
        from tune_batch.pipeline.probe import probe

        return probe
    raise AttributeError(f"module 'tune_batch' has no attribute {name!r}")
