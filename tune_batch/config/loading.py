"""Loading a config: ``load_config(path, overrides)`` reads YAML, applies ``--set`` overrides and
validates it into the schema; ``dump_config`` writes it back.

Every error names the dotted field, the bad value and what is allowed, in one line
(:class:`~tune_batch.errors.ConfigError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tune_batch.config.callables import register
from tune_batch.config.errors import describe, relevant
from tune_batch.config.schema import Config
from tune_batch.config.yamlio import apply_overrides, read_yaml
from tune_batch.errors import ConfigError

#: Where a config may hold a Python callable instead of "pkg.module:function" (notebooks).
CALLABLE_SLOTS = {"model": ("model", "name"), "data": ("data", "name"), "step": ("train", "step"),
                  "evaluate": ("train", "evaluate"), "builder": ("train", "builder"),
                  "worst_case": ("data", "worst_case")}


def _with_callables(raw: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every Python callable (in its slots, or ``given`` by slot name) registered
    and replaced by the string that names it."""
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for slot, (section, key) in CALLABLE_SLOTS.items():
        fn = given.get(slot)
        if fn is None and isinstance(raw.get(section), dict) and callable(raw[section].get(key)):
            fn = raw[section][key]
        sec = raw.setdefault(section, {}) if fn is not None else None
        if isinstance(sec, dict):
            sec[key] = register(fn)
    return raw


def config_from_dict(raw: dict[str, Any], source: str = "config", **callables: Any) -> Config:
    """Validate a plain dict into a Config; the first problem raises ConfigError. ``model``,
    ``data``, ``step`` and ``evaluate`` may be Python callables (keyword arguments, or in their
    places in ``raw``) instead of "pkg.module:function" strings."""
    unknown = set(callables) - set(CALLABLE_SLOTS)
    if unknown:
        raise ConfigError(f"{source}: unknown builder {sorted(unknown)[0]!r}; allowed: {', '.join(CALLABLE_SLOTS)}")
    raw = _with_callables(raw, callables)
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        errors = relevant(Config, e.errors())
        first = describe(Config, errors[0])
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from e


def load_config(path: str | Path, overrides: list[str] | None = None, **callables: Any) -> Config:
    """Load and validate a YAML config, applying ``--set``-style overrides first; ``model``,
    ``data``, ``step``, ``evaluate``: Python callables that replace those entries.

    Raises :class:`ConfigError` naming the field, the bad value and what is allowed.
    """
    raw = apply_overrides(read_yaml(path), overrides)
    return config_from_dict(raw, source=str(path), **callables)


def dump_config(config: Config) -> str:
    """The resolved config as YAML text (loads back to an equal Config)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
