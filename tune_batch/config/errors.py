"""One-line messages for pydantic validation errors: the dotted field, the bad value and what
is allowed (with a 'did you mean' for unknown keys)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel


def _model_at(root: Any, loc: tuple[Any, ...]) -> Any:
    """The model (section) at a location of the model ``root``; None where none is."""
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        candidates = [ann, *getattr(ann, "__args__", ())]
        for c in candidates:
            inner = getattr(c, "__args__", None)
            for cc in [c, *(inner or ())]:
                if isinstance(cc, type) and issubclass(cc, BaseModel):
                    model = cc
                    break
            else:
                continue
            break
        else:
            return None
    return model


def _fields_at(root: Any, loc: tuple[Any, ...]) -> list[str]:
    """The field names allowed at a location of the model ``root`` (for 'did you mean')."""
    return list(getattr(_model_at(root, loc), "model_fields", {}))


def _section_expected(root: Any, loc: tuple[Any, ...], value: Any) -> str:
    """What a section's place takes, for a value that is not a mapping: its keys (and a list where
    the field also takes one), with the mapping, or the list, that a lone number most likely meant."""
    keys = _fields_at(root, loc)
    field = getattr(_model_at(root, loc[:-1]), "model_fields", {}).get(loc[-1])
    members = getattr(getattr(field, "annotation", None), "__args__", ())
    takes_list = any(getattr(a, "__origin__", None) is list for a in members)
    what = f"a mapping with the keys {', '.join(keys)}" + (", or a list" if takes_list else "")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and takes_list:
        return f"{what} (for this value alone: [{value!r}])"
    if number and {"low", "high"} <= set(keys):
        return f"{what} (for this value alone: {{low: {value!r}, high: {value!r}}})"
    if isinstance(value, list) and {"low", "high"} <= set(keys) and value and all(
            isinstance(v, (int, float)) for v in value):
        return f"{what}: a range is searched, not a list (here {{low: {min(value)!r}, high: {max(value)!r}}})"
    return what


def describe(root: Any, err: dict[str, Any]) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "union["))))
    # pydantic puts union member names (e.g. 'BatchRange', 'list[int]') into loc: drop them
    loc = tuple(p for p in loc if not (isinstance(p, str) and (p[:1].isupper() or "[" in p)))
    dotted = ".".join(str(p) for p in loc) or "config"
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _fields_at(root, loc[:-1])
        hint = difflib.get_close_matches(key, allowed, n=1)
        did = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"{dotted}: unknown key{did}; allowed keys: {', '.join(allowed)}"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind == "missing":
        return f"{dotted}: required field is missing"
    if kind == "model_type" and loc:  # a section given as a number, a string or a list
        return f"{dotted} = {_short(value)}: a section is expected: {_section_expected(root, loc, value)}"
    if isinstance(value, dict):  # a whole-section check: its message names the values
        return f"{dotted}: {msg}" if loc else msg
    return f"{dotted} = {_short(value)}: {msg}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def relevant(root: Any, errors: list[Any]) -> list[Any]:
    """Drop 'wrong type' errors from union members the input obviously was not meant for."""
    def key(err: Any) -> str:
        return describe(root, err).split(":")[0].split(" = ")[0]

    by_loc: dict[str, list[Any]] = {}
    for err in errors:
        by_loc.setdefault(key(err), []).append(err)
    out = []
    for group in by_loc.values():
        specific = [e for e in group if not e["type"].endswith("_type")]
        out.extend(specific or group[:1])
    return out
