"""The config reference (docs/config.md), generated from the schema: every field with its type,
what is allowed, its default and its doc.

    python -m tune_batch.config.reference > docs/config.md

``fields()`` lists every field (tests check that each has a doc); ``render()`` returns the page.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tune_batch.config.schema import Config

HEADER = """# Config reference

Generated from the schema (`tune_batch/config/`) by
`python -m tune_batch.config.reference > docs/config.md`; a test fails when this page is stale.

A config is a YAML file. Every section rejects unknown keys (with a "did you mean"), values are
checked at load time, and an error names the dotted field, the bad value and what is allowed.
Any value can be set on the command line: `--set budget.trials=8` (YAML-typed, repeatable).
Sizes such as `resources.device_memory` take `"24GiB"`, `"512MiB"`, a byte count, or a fraction
of the device.
"""

_SECTION_DEFAULT = "(its fields' defaults)"
_BOUNDS = ((annotated_types.Ge, ">=", "ge"), (annotated_types.Gt, ">", "gt"), (annotated_types.Le, "<=", "le"),
           (annotated_types.Lt, "<", "lt"))


@dataclass(frozen=True)
class FieldDoc:
    """One config field as the reference shows it."""

    key: str  # dotted, e.g. "budget.trials"; list items as "objectives[].metric"
    type: str
    default: str
    doc: str  # the field's doc, on one line ("" when it has none)
    section: bool  # a section of its own (its fields follow)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The config sections inside an annotation (``X``, ``X | list[int]``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _type(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "{" + ", ".join(annotation.model_fields) + "}"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type(a) for a in args)
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info: FieldInfo) -> str:
    out = [f"{sign} {getattr(m, attr)}" for m in info.metadata for kind, sign, attr in _BOUNDS if isinstance(m, kind)]
    return f" ({', '.join(out)})" if out else ""


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return _SECTION_DEFAULT
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [v.model_dump(mode="json") for v in value]
    return f"`{json.dumps(value)}`"


def _one_line(doc: str | None) -> str:
    return " ".join((doc or "").split()).replace("|", "\\|")


def fields(model: type[BaseModel] = Config, prefix: str = "") -> list[FieldDoc]:
    """Every field of ``model`` and of the sections inside it, depth first, in schema order."""
    out = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        inner = _models(info.annotation)
        shown = "section" if _models(info.annotation) == [info.annotation] else _type(info.annotation)
        out.append(FieldDoc(key, shown + _bounds(info), _default(info), _one_line(info.description), bool(inner)))
        for sub in inner:
            many = typing.get_origin(info.annotation) is list
            out += fields(sub, f"{key}[]." if many else f"{key}.")
    return out


def _table(rows: list[FieldDoc]) -> list[str]:
    lines = ["| key | type | default | what it is |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {r.type} | {r.default} | {r.doc} |" for r in rows]
    return lines


def render() -> str:
    """The reference page (Markdown): the top-level fields, then one table per section."""
    every = fields()
    top = [f for f in every if "." not in f.key]
    lines = [HEADER, "## Sections", ""]
    lines += [f"- [`{f.key}`](#{f.key}): {f.doc}" for f in top if f.section]
    lines += ["", "## Top level", ""] + _table([f for f in top if not f.section])
    for section in (f for f in top if f.section):
        rows = [f for f in every if f.key.startswith((f"{section.key}.", f"{section.key}[]."))]
        default = "" if section.default == _SECTION_DEFAULT else f" Default: {section.default}."
        lines += ["", f"## {section.key}", "", section.doc + default, ""] + _table(rows)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
