"""Import a user's ``pkg.module:function`` (``pkgutil.resolve_name``), or find a Python callable
registered by the config (``config.callables``).

Note: such an entry runs the user's own code, in every trial process.
"""

from __future__ import annotations

import pkgutil
import sys
from collections.abc import Callable
from typing import Any

from tune_batch.config.callables import CALLABLE_PREFIX, lookup
from tune_batch.errors import WorkloadError


def resolve_callable(spec: str, field: str) -> Callable[..., Any]:
    """Return the callable named by ``pkg.module:function`` (or registered as a Python callable).

    Raises WorkloadError naming ``field`` when the module does not import, the attribute is
    missing or it is not callable.
    """
    if spec.startswith(CALLABLE_PREFIX):
        fn = lookup(spec)
        if fn is None:
            raise WorkloadError(f"{field} = {spec!r}: a Python callable given in another process; pass the function "
                                f"again (load_config(..., {field.split('.')[-1] if field != 'model.name' else 'model'}="
                                f"fn)) or use 'pkg.module:function'")
        return fn
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise WorkloadError(f"{field} = {spec!r}: expected 'pkg.module:function'")
    try:
        obj = pkgutil.resolve_name(spec)
    except AttributeError as e:
        if module_name not in sys.modules:  # raised while importing the module itself
            raise WorkloadError(f"{field} = {spec!r}: module {module_name!r} does not import "
                                f"({type(e).__name__}: {e})") from e
        raise WorkloadError(f"{field} = {spec!r}: {module_name!r} has no attribute {attr!r}") from e
    except Exception as e:  # any import-time failure of user code is the user's to fix
        raise WorkloadError(f"{field} = {spec!r}: module {module_name!r} does not import "
                            f"({type(e).__name__}: {e})") from e
    if not callable(obj):
        raise WorkloadError(f"{field} = {spec!r}: {attr!r} is a {type(obj).__name__}, not a callable")
    return obj


def call_builder(fn: Callable[..., Any], field: str, value: str, **kwargs: Any) -> Any:
    """``fn(**kwargs)``; any exception it raises (a bad keyword from the config's ``kwargs``, a
    failure inside the user's own builder) becomes one WorkloadError naming the field."""
    try:
        return fn(**kwargs)
    except WorkloadError:
        raise
    except Exception as e:
        raise WorkloadError(f"{field} = {value!r}: building it failed ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200] if str(e) else ''}); check {field.split('.')[0]}.kwargs "
                            f"and the builder") from e
