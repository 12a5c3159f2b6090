from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tune_batch.config import Config, config_from_dict, dump_config, load_config, parse_memory
from tune_batch.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_shipped_configs_are_valid() -> None:
    q = load_config(REPO / "configs/quickstart.yaml")
    assert q.data.name == "digits" and q.space.num_gpus == [1]
    r = load_config(REPO / "configs/resnet18.yaml")
    assert r.model.pretrained and r.data.resize == 224 and r.data.num_workers == 4
    assert r.space.batch_choices() == [16, 32, 64, 128, 256, 512]
    assert r.space.num_gpus == [1, 2, 4, 8] and r.optimizer.momentum == 0.9
    # every shipped config that confirms its candidates compares them with a baseline: what a user runs today
    for path in sorted((REPO / "configs").glob("*.yaml")):
        cfg = load_config(path)
        if cfg.confirm.candidates > 0:
            assert cfg.baseline is not None, path.name


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs/resnet18.yaml", ["budget.trials=3", "space.num_gpus=[1,2]"])
    p = tmp_path / "c.yaml"
    p.write_text(dump_config(cfg))
    assert load_config(p) == cfg


def test_overrides_are_yaml_typed() -> None:
    cfg = load_config(REPO / "configs/quickstart.yaml",
                      ["budget.trials=5", "space.lr.low=1e-4", "data.name=synthetic", "space.batch_size=[16, 48]",
                       "resources.device_memory=256MiB", "profile.enabled=true"])
    assert cfg.budget.trials == 5 and cfg.space.lr.low == 1e-4 and cfg.data.name == "synthetic"
    assert cfg.space.batch_choices() == [16, 48] and cfg.profile.enabled
    assert parse_memory(cfg.resources.device_memory) == ("bytes", 256 * 2**20)


@pytest.mark.parametrize(("value", "parsed"), [
    ("24GiB", ("bytes", 24 * 2**30)), ("512 MiB", ("bytes", 512 * 2**20)), ("1.5GB", ("bytes", 1.5e9)),
    (4294967296, ("bytes", 2**32)), ("4294967296", ("bytes", 2**32)),  # plain byte counts
    (0.5, ("fraction", 0.5)), ("0.25", ("fraction", 0.25)), (1, ("fraction", 1.0)),
])
def test_memory_sizes(value: object, parsed: tuple) -> None:
    assert parse_memory(value) == parsed


BAD = [
    # (raw config, words the one-line message must contain)
    ({"space": {"batchsize": {"min": 16}}}, ["space.batchsize", "unknown key", "did you mean 'batch_size'"]),
    ({"modle": {}}, ["modle", "did you mean 'model'"]),
    ({"space": {"lr": {"low": 0}}}, ["space.lr.low", "0", "greater than 0"]),
    ({"space": {"lr": {"low": -1e-3}}}, ["space.lr.low", "greater than 0"]),
    ({"space": {"lr": {"low": 0.1, "high": 0.01}}}, ["space.lr", "low = 0.1 > high = 0.01"]),
    ({"space": {"batch_size": {"min": 24, "max": 64}}}, ["space.batch_size", "min = 24", "power of two"]),
    ({"space": {"batch_size": {"min": 128, "max": 16}}}, ["space.batch_size", "min = 128 > max = 16"]),
    ({"space": {"batch_size": []}}, ["space.batch_size", "empty"]),
    ({"space": {"num_gpus": [0]}}, ["space.num_gpus", "0", ">= 1"]),
    ({"space": {"num_gpus": [-2]}}, ["space.num_gpus", "-2"]),
    ({"space": {"num_gpus": []}}, ["space.num_gpus", "empty"]),
    ({"space": {"batch_size": [16], "num_gpus": [1, 4]}},
     ["num_gpus = 4", "min_batch_per_gpu (16) x 4 = 64", "largest batch_size is 16"]),
    ({"budget": {"trials": "many"}}, ["budget.trials", "'many'", "integer"]),
    ({"budget": {"trials": 0}}, ["budget.trials", "greater than or equal to 1"]),
    ({"budget": {"train_samples": 2.5}}, ["budget.train_samples", "2.5"]),
    ({"search": {"sampler": "cmaes"}}, ["search.sampler", "'cmaes'", "'tpe', 'nsga2', 'gp' or 'random'"]),
    ({"search": {"backend": "dask"}}, ["search.backend", "'dask'"]),
    ({"data": {"name": "mnist"}}, ["data.name", "'mnist'", "cifar10 | digits | synthetic | imagefolder"]),
    ({"objectives": [{"metric": "speed"}]}, ["objectives.0.metric", "'speed'", "samples_per_s"]),
    ({"objectives": []}, ["objectives", "at least one"]),
    ({"objectives": [{"metric": "val_acc"}, {"metric": "val_acc"}]}, ["appears twice"]),
    ({"resources": {"device_memory": "lots"}}, ["resources.device_memory", "'lots'", "24GiB"]),
    ({"resources": {"device_memory": -1}}, ["resources.device_memory", "-1"]),
    ({"resources": {"device_memory": "3XB"}}, ["unit 'XB'"]),
    ({"resources": {"device_memory": "1B"}}, ["resources.device_memory", "'1B'", "1 MiB to 1 PiB"]),
    ({"resources": {"device_memory": "99999999TiB"}}, ["resources.device_memory", "1 MiB to 1 PiB"]),
    ({"resources": {"cpus_per_trial": 0}}, ["resources.cpus_per_trial"]),
    ({"optimizer": {"momentum": 1.5}}, ["optimizer.momentum", "1.5"]),
    # another optimizer would ignore SGD's momentum: said, with where its own goes
    ({"optimizer": {"name": "adam", "momentum": 0.5}}, ["optimizer", "momentum = 0.5", "adam takes no momentum"]),
    ({"optimizer": {"name": "rmsprop", "momentum": 0.5}}, ["momentum = 0.5", "optimizer.kwargs: {momentum: 0.5}"]),
    # a trainer makes its own optimizer: what only tune_batch's loop reads is refused, not ignored
    ({"train": {"loop": "lightning", "builder": "tune_batch.workload.examples.lightning_cnn:build"},
      "optimizer": {"weight_decay": 0.1}},
     ["optimizer.weight_decay = 0.1", "train.loop = 'lightning'", "set it there"]),
    ({"train": {"loop": "keras", "builder": "tune_batch.workload.examples.keras_dense:build"},
      "optimizer": {"name": "adam", "kwargs": {"eps": 1e-6}}}, ["optimizer.kwargs", "train.loop = 'keras'"]),
    ({"name": "has space"}, ["name", "'has space'"]),
    ({"model": {"num_classes": 1}}, ["model.num_classes"]),
    ({"profile": {"enabled": "yes"}}, ["profile.enabled", "'yes'", "boolean"]),
    ({"baseline": {"batch_size": 30, "lr": 0.1, "num_gpus": 4}},
     ["baseline", "batch_size 30", "num_gpus 4", "multiple of 4"]),
    # a section given as one value or a list: its keys, and what that value most likely meant
    ({"space": {"lr": 0.01}}, ["space.lr = 0.01", "keys low, high, log", "{low: 0.01, high: 0.01}"]),
    ({"space": {"lr": [0.1, 0.01]}}, ["space.lr", "a range is searched, not a list", "{low: 0.01, high: 0.1}"]),
    ({"space": {"batch_size": 64}}, ["space.batch_size = 64", "keys min, max, or a list", "[64]"]),
    ({"optimizer": "sgd"}, ["optimizer = 'sgd'", "a section is expected", "keys name, momentum"]),
    ({"goal": 10}, ["goal = 10", "keys train_samples, epochs, target"]),
]


@pytest.mark.parametrize(("raw", "words"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_config_names_field_value_and_what_is_allowed(raw: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    msg = str(info.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nspace:\n  lr: {low: 1e-3, high: 0.1\nbudget: {}\n")
    with pytest.raises(ConfigError, match=r"YAML syntax error at line \d+, column \d+"):
        load_config(p)


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    """A second `budget:` section silently replaced the first (12 trials ran, not the 4 asked)."""
    p = tmp_path / "dup.yaml"
    p.write_text("name: x\nbudget: {trials: 4}\nspace: {num_gpus: [1]}\nbudget: {train_samples: 2048}\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: YAML error at line 4, column 1: 'budget' is given twice in one "
                                          r"mapping \(first at line 2\)"):
        load_config(p)
    p.write_text("name: x\nbudget: {trials: 4, trials: 8}\n")
    with pytest.raises(ConfigError, match=r"'trials' is given twice"):
        load_config(p)
    # a merge key overrides on purpose: allowed
    p.write_text("name: x\nbudget:\n  <<: {trials: 4, train_samples: 2048}\n  trials: 3\n")
    assert load_config(p).budget.trials == 3


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(p)


@pytest.mark.parametrize(("override", "words"), [
    ("budget.trails=3", ["budget.trails", "did you mean 'trials'"]),
    ("budget.trials=three", ["budget.trials", "'three'"]),
    ("space.num_gpus=[1, 2", ["not valid YAML"]),
    ("budget", ["expected KEY=VALUE"]),
    ("name.x=1", ["'name' is not a section"]),
])
def test_bad_overrides(override: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(REPO / "configs/quickstart.yaml", [override])
    for w in words:
        assert w in str(info.value)


def test_safe_load_refuses_python_tags(tmp_path: Path) -> None:
    p = tmp_path / "evil.yaml"
    p.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="YAML syntax error"):
        load_config(p)


def test_defaults_are_the_documented_ones() -> None:
    cfg = Config()
    assert cfg.metric_names == ["samples_per_s", "device_util", "val_acc"]
    assert cfg.directions == ["maximize"] * 3
    assert cfg.space.min_batch_per_gpu == 16 and cfg.resources.memory_margin == 0.1
    assert yaml.safe_load(dump_config(cfg))["search"]["sampler"] == "gp" and not cfg.search.seed_ladder


def test_every_config_field_has_a_doc() -> None:
    from tune_batch.config.reference import fields

    every = fields()
    assert len(every) > 70 and not [f.key for f in every if not f.doc]


def test_docs_config_md_is_the_reference_the_schema_generates() -> None:
    from tests.conftest import REPO
    from tune_batch.config.reference import render

    page = REPO / "docs" / "config.md"
    assert page.exists() and page.read_text() == render(), (
        "docs/config.md is stale: python -m tune_batch.config.reference > docs/config.md")


def test_the_reference_checks_can_fail() -> None:
    # a section with a field added without a doc: seen as undocumented, and the page changes
    from pydantic import Field

    from tune_batch.config.reference import fields, render
    from tune_batch.config.train import Section

    class Extra(Section):
        documented: int = Field(1, ge=0)
        """A field with a doc."""
        bare: bool = False

    assert [(f.key, f.type, f.default, f.doc) for f in fields(Extra, "extra.")] == [
        ("extra.documented", "int (>= 0)", "`1`", "A field with a doc."), ("extra.bare", "bool", "`false`", "")]
    assert "`budget.trials` | int (>= 1) | `12` |" in render()
