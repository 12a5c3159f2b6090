"""Reading YAML safely (no Python tags; ``1e-4`` read as a number) and ``--set`` overrides.

User mistakes raise ConfigError naming the file or the override.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tune_batch.errors import ConfigError

MAX_FILE_BYTES = 1_000_000
MAX_VALUES = 100_000


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _set_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    if not all(parts):
        raise ConfigError(f"--set {dotted}=...: bad key; use dotted names like budget.trials=8")
    node: Any = raw
    for part in parts[:-1]:
        nxt = node.get(part) if isinstance(node, dict) else None
        if nxt is None:
            nxt = {}
            node[part] = nxt
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: {part!r} is not a section (it holds {_short(nxt)})")
        node = nxt
    node[parts[-1]] = value


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping key given twice."""


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads ``1e-4`` as a float (YAML 1.1 wants ``1.0e-4``), and
    refuses a key given twice in one mapping (YAML's loaders keep the last one silently: a second
    ``budget:`` section dropped the first one's settings)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base" merges on purpose
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: the base loader says what is wrong with it
                    continue
                if first is not key_node.start_mark:
                    raise _DuplicateKey(
                        None, None, f"{key!r} is given twice in one mapping (first at line {first.line + 1}); the "
                        f"second would silently replace the first: merge them", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` semantics (no Python tags), with ``1e-4`` read as a float."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def _split_override(item: str) -> tuple[str, str]:
    """(dotted key, value text) of one ``--set KEY=VALUE``; ConfigError without an ``=``."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. budget.trials=8")
    key, text = item.split("=", 1)
    return key.strip(), text


def overridden(overrides: list[str] | None, key: str) -> bool:
    """Whether the ``--set`` overrides set ``key`` (a dotted path) themselves."""
    return any(_split_override(item)[0] == key for item in overrides or [])


def apply_overrides(raw: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values are parsed as YAML (``[1,2]``, ``true``, ``1e-3``)."""
    for item in overrides or []:
        key, text = _split_override(item)
        try:
            value = safe_load(text) if text.strip() else None
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key}={text}: value is not valid YAML ({_yaml_problem(e)})") from e
        _set_path(raw, key, value)
    return raw


def _yaml_problem(e: yaml.YAMLError) -> str:
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with ``yaml.safe_load``; user errors raise ConfigError."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if p.is_dir():
        raise ConfigError(f"config file {str(p)!r} is a directory; give a .yaml file")
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"config file {str(p)!r} is {p.stat().st_size} bytes; a config is at most "
                              f"{MAX_FILE_BYTES // 1000} kB")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {e}") from e
    try:
        raw = safe_load(text)
    except yaml.YAMLError as e:
        what = "YAML error" if isinstance(e, _DuplicateKey) else "YAML syntax error"
        raise ConfigError(f"{p}: {what} at {_yaml_problem(e)}") from e
    if raw is None:
        raise ConfigError(f"{p}: the file is empty; start from configs/quickstart.yaml (CPU, offline) or "
                          f"configs/resnet18.yaml (the seed scenario)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(raw).__name__}")
    if _expanded_size(raw, MAX_VALUES) > MAX_VALUES:
        raise ConfigError(f"{p}: more than {MAX_VALUES} values once YAML aliases are expanded (an alias bomb?); "
                          f"a config is a few dozen")
    return raw


def _expanded_size(obj: Any, limit: int) -> int:
    """How many values ``obj`` holds with aliases (shared references) expanded, counting no
    further than just past ``limit`` (so an alias bomb costs ``limit`` steps, not its size)."""
    count, stack = 0, [obj]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count
