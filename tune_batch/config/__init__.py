"""The configuration: its ``schema`` (with the sections of ``space`` and ``train``), the YAML
``loading`` with ``--set`` overrides, the one-line ``errors`` of validation, and its generated
``reference`` (docs/config.md)."""

from __future__ import annotations

from tune_batch.config.loading import config_from_dict, dump_config, load_config
from tune_batch.config.schema import (
    BudgetConfig,
    Config,
    ConfirmConfig,
    DataConfig,
    ModelConfig,
    ObjectiveConfig,
    ProfileConfig,
    RepeatsConfig,
    ResourcesConfig,
    SearchConfig,
)
from tune_batch.config.sizes import parse_memory
from tune_batch.config.space import SpaceConfig

__all__ = ["BudgetConfig", "Config", "ConfirmConfig", "DataConfig", "ModelConfig", "ObjectiveConfig", "ProfileConfig",
           "RepeatsConfig", "ResourcesConfig", "SearchConfig", "SpaceConfig", "config_from_dict", "dump_config",
           "load_config", "parse_memory"]
