"""The layout's rules, checked on the source with ``ast``: module and function sizes, few modules
at the top, no import cycle among tune_batch modules, no import up a floor, ray, optuna and torch
only where they belong, nothing heavy on import, and no process-wide state left behind by a
search."""

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
MAX_TOP_LEVEL_MODULES = 10
#: Where each heavy library may be imported (module paths relative to tune_batch/).
ALLOWED = {
    "ray": lambda rel: rel.startswith("backends/ray/"),
    "optuna": lambda rel: rel in ("study/seam.py", "study/samplers.py", "backends/local.py"),
    # where training runs (and the device checks before a search or max-batch)
    "torch": lambda rel: rel.startswith(("trial/", "measure/", "workload/", "backends/", "pipeline/")),
    # the user's trainers: only in the loop that runs them, and in the shipped examples' builders
    **{lib: (lambda rel: rel.startswith(("trial/trainers/", "workload/examples/")))
       for lib in ("lightning", "pytorch_lightning", "transformers", "keras")},
}
#: The floors of the house, lowest first. A module imports only from its own package or from a
#: package on a floor below; two packages on one floor do not import each other. The modules at
#: the top (errors.py, cli.py, ...) count as packages of their own name, tune_batch/__init__.py
#: as "__init__". The folders read in the data's order (config -> pipeline -> study, backends ->
#: trial -> store -> analysis -> decide -> output); the floors say which may use which: the
#: records' types and the config below everything, the pipeline that runs it all at the top.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("config",),
    ("store", "measure", "workload"),
    ("analysis",),
    ("trial", "study", "decide"),
    ("output", "export"),
    ("backends",),
    ("pipeline",),
    ("cli", "optuna", "__init__"),
    ("__main__",),
)


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
    assert "tune_batch.analysis.report" in graph["tune_batch.output.files"]
    assert "tune_batch.output.files" not in graph["tune_batch.analysis.report"]


def _package(module: str) -> str:
    """The folder (or top-level module) a tune_batch module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _floor(package: str) -> int:
    found = [i for i, floor in enumerate(FLOORS) if package in floor]
    assert found, f"{package!r} is on no floor: add it to FLOORS"
    return found[0]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports of ``graph`` that go up a floor, or across to another package of one floor."""
    bad = []
    for name, targets in graph.items():
        for t in sorted(targets):
            a, b = _package(name), _package(t)
            if a != b and _floor(b) >= _floor(a):
                bad.append(f"{name} ({a}, floor {_floor(a)}) imports {t} ({b}, floor {_floor(b)})")
    return bad


def test_at_most_ten_modules_at_the_top() -> None:
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_import_up_a_floor() -> None:
    assert not _upward(_graph())


def test_the_floor_check_can_fail() -> None:
    # the checker itself: the schema reading the terminal's text, a trial reading a sibling floor
    bad = _upward({"tune_batch.config.schema": {"tune_batch.output.text"},
                   "tune_batch.trial.run": {"tune_batch.decide.confirm", "tune_batch.trial.loop"}})
    assert len(bad) == 2 and "output.text" in bad[0] and "decide.confirm" in bad[1]


def test_the_backends_run_what_they_are_handed_and_plan_nothing() -> None:
    # one owner for the stages (pipeline.stages): no backend module reads the decision's planning
    planners = ("tune_batch.decide", "tune_batch.pipeline")
    bad = {name: sorted(t for t in targets if t.startswith(planners))
           for name, targets in _graph().items() if name.startswith("tune_batch.backends")}
    assert not {k: v for k, v in bad.items() if v}
    stages = (PKG / "pipeline" / "stages.py").read_text()
    assert "def run_stages" in stages and "class Backend" in stages


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
    code = ("import sys, tune_batch, tune_batch.cli, tune_batch.config, tune_batch.analysis.report, "
            "tune_batch.output.files, tune_batch.output.text, tune_batch.pipeline.search, tune_batch.store.records, "
            "tune_batch.export; "
            "print(sorted(m for m in ('ray', 'torch', 'optuna', 'lightning', 'transformers', 'keras', 'accelerate') "
            "if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def process_state() -> dict[str, Any]:
    """What a search could change process-wide: logger levels, warning filters, environment,
    torch's global random state and its thread count."""
    import torch

    return {
        "levels": {n: logging.getLogger(n).level for n in ("ray", "ray.tune", "ray.train", "optuna", "tune_batch")},
        "filters": list(warnings.filters),
        "env": dict(os.environ),
        "torch_rng": torch.random.get_rng_state().numpy().tobytes(),
        "threads": torch.get_num_threads(),
    }


@pytest.mark.slow
def test_search_leaves_no_process_wide_state_behind(tmp_path: Path) -> None:
    # libraries' own import-time settings (torch's KMP_* variables, optuna's INFO default, plotly's
    # warning filter) are theirs: import them first, so that what is compared is what search() does
    import optuna  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import plotly.io  # noqa: F401
    import plotly.subplots  # noqa: F401
    import sklearn.datasets  # noqa: F401
    import torch.profiler  # noqa: F401

    from tune_batch.pipeline.search import search

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
    assert after["torch_rng"] == before["torch_rng"] and after["threads"] == before["threads"]
    logging.getLogger("optuna").setLevel(logging.WARNING)
    logging.getLogger("ray").setLevel(logging.NOTSET)


def test_a_trial_leaves_the_callers_torch_random_state_and_threads() -> None:
    """run_trial (the quickstart's model, one small trial) seeds torch for itself, and puts the
    caller's global random state and thread count back."""
    import torch

    from tests.conftest import REPO
    from tune_batch import load_config, run_trial

    cfg = load_config(REPO / "configs" / "quickstart.yaml", ["budget.train_samples=256", "resources.peak_flops=1e11"])
    torch.manual_seed(1234)
    torch.rand(3)  # somewhere in the caller's stream
    before = process_state()
    r = run_trial(cfg, {"batch_size": 32, "lr": 0.05, "num_gpus": 1}, threads=1)
    assert r.status.value == "ok", r.reason
    after = process_state()
    assert after["torch_rng"] == before["torch_rng"] and after["threads"] == before["threads"]
