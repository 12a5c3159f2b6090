"""scripts/bench_kept_memory.py's reading of a search: where its wall seconds went."""

from __future__ import annotations

import pytest

from tests.conftest import script


def _row(trial_id, duration, **info) -> dict:
    return {"trial_id": trial_id, "duration_s": duration, "info": info}


def test_a_search_wall_is_split_into_trials_repeats_confirmation_baseline_and_the_rest() -> None:
    rows = [_row(0, 2.0), _row(1, 3.0), _row("0s1", 1.5, repeat_of=0), _row("0c0", 10.0, confirm_of=0, train_s=7.0),
            _row("baseline-c0", 6.0, confirm_of="baseline", train_s=4.0), _row(2, None)]
    with script("bench_kept_memory") as bench:
        parts = bench.split(rows, 30.0)
    assert parts["trials"] == 5.0 and parts["repeats"] == 1.5
    assert parts["candidates"] == 10.0 and parts["candidates_training"] == 7.0
    assert parts["baseline"] == 6.0 and parts["baseline_training"] == 4.0
    assert parts["rest"] == pytest.approx(30.0 - 22.5)
    assert set(parts) == set(bench.PARTS)


def test_a_searchs_figures_are_kept_per_way_and_an_earlier_commit_runs_from_its_own_tree(tmp_path) -> None:
    """bench_one_experiment's other side: a worktree of a commit, from which tune_batch imports
    (not from this checkout or an installed copy)."""
    import subprocess

    with script("bench_kept_memory") as bench:
        out: dict[str, list] = {"wall": []}
        bench.keep(out, {"wall": 1.0, "trials": 2.0})
        bench.keep(out, {"wall": 3.0, "trials": 4.0})
        assert out == {"wall": [1.0, 3.0], "trials": [2.0, 4.0]}
    with script("bench_one_experiment") as one:
        with one.against_tree("HEAD", str(tmp_path)) as tree:  # each tree checked to import from itself
            assert (tree / "tune_batch" / "__init__.py").exists()
            one.check_tree(tree)
        assert not tree.exists()  # removed afterwards
        listed = subprocess.run(["git", "-C", str(one.REPO), "worktree", "list"], capture_output=True, text=True)
        assert str(tree) not in listed.stdout
