"""README's Python example runs as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_readme_optuna_example_runs(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "Objective(cfg" in b)
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "example.py").write_text(example)
    p = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "{'batch_size': 32, 'lr': 0.02, 'num_gpus': 1" in p.stdout  # the enqueued trial ran first
    assert "[0.0, 0.0, 0.0] ok " in p.stdout  # memory, space, diverged: all feasible
    assert (tmp_path / "mine.db").exists()
