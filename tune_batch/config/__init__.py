"""The configuration: its ``schema`` (with ``train``'s sections), the YAML ``loading`` with
``--set`` overrides, and the one-line ``errors`` of validation."""

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
    SpaceConfig,
)
from tune_batch.config.sizes import parse_memory

__all__ = ["BudgetConfig", "Config", "ConfirmConfig", "DataConfig", "ModelConfig", "ObjectiveConfig", "ProfileConfig",
           "RepeatsConfig", "ResourcesConfig", "SearchConfig", "SpaceConfig", "config_from_dict", "dump_config",
           "load_config", "parse_memory"]
