"""The layout's rules, checked on the source with ``ast``: module and function sizes, no import
cycle among tune_batch modules, ray and optuna only where they belong, nothing heavy on import,
and no process-wide state left behind by a search."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, tiny_config

PKG = REPO / "tune_batch"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
#: Where each heavy library may be imported (module paths relative to tune_batch/).
ALLOWED = {
    "ray": lambda rel: rel.startswith("backends/ray/"),
    "optuna": lambda rel: rel in ("study.py", "samplers.py", "backends/optuna.py"),
    # the user's trainers: only in the loop that runs them, and in the shipped examples' builders
    **{lib: (lambda rel: rel.startswith(("trial/trainers/", "workload/examples/")))
       for lib in ("lightning", "pytorch_lightning", "transformers", "keras")},
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST, name: str, is_pkg: bool) -> list[str]:
    """Every module imported anywhere in a module (lazy imports inside functions too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name if is_pkg else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            found.append(base)
            found += [f"{base}.{a.name}" for a in node.names]  # a submodule, when it is one
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        targets = set(_imports(tree, name, path.name == "__init__.py"))
        graph[name] = {t for t in targets if t in mods and t != name}
        # "from pkg import sub" names the submodule, not the package's __init__
        graph[name] -= {t for t in list(graph[name]) if any(s.startswith(t + ".") for s in graph[name])
                        and not _pkg_names_used(tree, t)}
    return graph


def _pkg_names_used(tree: ast.AST, pkg: str) -> bool:
    """Whether a ``from pkg import x`` takes a non-module name x from the package itself."""
    mods = _modules()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == pkg and not node.level:
            if any(f"{pkg}.{a.name}" not in mods for a in node.names):
                return True
    return False


def test_no_module_or_function_is_too_long() -> None:
    too_long = []
    for name, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"function {name}.{node.name}: {n} lines")
    assert not too_long, too_long


def test_no_import_cycle_among_tune_batch_modules() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_the_cycle_check_can_fail() -> None:
    # the checker itself: a module importing its importer is found
    graph = _graph()
    assert "tune_batch.report" in graph["tune_batch.files"]
    assert "tune_batch.files" not in graph["tune_batch.report"]


@pytest.mark.parametrize("lib", sorted(ALLOWED))
def test_heavy_libraries_only_where_they_belong(lib: str) -> None:
    offenders = []
    for name, path in _modules().items():
        rel = path.relative_to(PKG).as_posix()
        imported = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        if any(m == lib or m.startswith(lib + ".") for m in imported) and not ALLOWED[lib](rel):
            offenders.append(rel)
    assert not offenders, f"{lib} imported in {offenders}"


def test_importing_the_package_loads_no_heavy_library() -> None:
    code = ("import sys, tune_batch, tune_batch.cli, tune_batch.config, tune_batch.report, tune_batch.files, "
            "tune_batch.runner, tune_batch.records, tune_batch.export; "
            "print(sorted(m for m in ('ray', 'torch', 'optuna', 'lightning', 'transformers', 'keras', 'accelerate') "
            "if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def process_state() -> dict[str, Any]:
    """What a search could change process-wide: logger levels, warning filters, environment."""
    return {
        "levels": {n: logging.getLogger(n).level for n in ("ray", "ray.tune", "ray.train", "optuna", "tune_batch")},
        "filters": list(warnings.filters),
        "env": dict(os.environ),
    }


def test_search_leaves_no_process_wide_state_behind(tmp_path: Path) -> None:
    # libraries' own import-time settings (torch's KMP_* variables, optuna's INFO default, plotly's
    # warning filter) are theirs: import them first, so that what is compared is what search() does
    import optuna  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import plotly.io  # noqa: F401
    import plotly.subplots  # noqa: F401
    import sklearn.datasets  # noqa: F401
    import torch.profiler  # noqa: F401

    from tune_batch.runner import search

    optuna.logging.get_logger("optuna")  # optuna configures its root logger on first use
    logging.getLogger("optuna").setLevel(logging.DEBUG)  # a user's own choices, kept
    logging.getLogger("ray").setLevel(logging.INFO)
    os.environ.pop("KINETO_LOG_LEVEL", None)
    before = process_state()
    cfg = tiny_config(search={"backend": "optuna"}, budget={"trials": 2, "train_samples": 256},
                      profile={"enabled": True, "wait": 0, "warmup": 1, "active": 1})
    search(cfg, tmp_path / "run", quiet=True)
    after = process_state()
    changed_env = {k for k in set(after["env"]) | set(before["env"]) if after["env"].get(k) != before["env"].get(k)}
    assert not changed_env, {k: (before["env"].get(k), after["env"].get(k)) for k in changed_env}
    assert after["levels"] == before["levels"]
    assert after["filters"] == before["filters"], [f for f in after["filters"] if f not in before["filters"]]
    logging.getLogger("optuna").setLevel(logging.WARNING)
    logging.getLogger("ray").setLevel(logging.NOTSET)
