"""Import a user's ``pkg.module:function``.

Note: such an entry runs the user's own code, in every trial process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from tune_batch.errors import WorkloadError


def resolve_callable(spec: str, field: str) -> Callable[..., Any]:
    """Return the callable named by ``pkg.module:function``.

    Raises WorkloadError naming ``field`` when the module does not import, the attribute is
    missing or it is not callable.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise WorkloadError(f"{field} = {spec!r}: expected 'pkg.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import-time failure of user code is the user's to fix
        raise WorkloadError(f"{field} = {spec!r}: module {module_name!r} does not import ({type(e).__name__}: {e})") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(f"{field} = {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise WorkloadError(f"{field} = {spec!r}: {attr!r} is a {type(obj).__name__}, not a callable")
    return obj
