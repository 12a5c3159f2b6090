"""A recommended config that does not run out of memory later: the worst case of each trial (the
largest batch of the data, a validation batch), a confirmation run watched over its whole length
(peak per quarter, growth: a leak?), the margin the recommendation keeps under the limit, other
processes' memory on a GPU, and no memory left behind by a trial."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, tiny_config
from tune_batch.analysis.growth import growth
from tune_batch.analysis.notes import texts
from tune_batch.analysis.report import build_report
from tune_batch.config import Config, config_from_dict, load_config
from tune_batch.errors import ConfigError
from tune_batch.measure.memory import kept_reading_at, live_tensor_bytes
from tune_batch.output.files import write_files
from tune_batch.output.text import render_summary
from tune_batch.store.records import Status, TrialResult
from tune_batch.trial import run_trial
from tune_batch.trial.curve import confirm_run
from tune_batch.trial.trainers.curve import EvalPlan

MiB = 2**20
VARLEN = REPO / "configs/tiny_lm_varlen.yaml"
OBJ = [{"metric": "samples_per_s"}, {"metric": "val_acc"}]


# ---------------------------------------------------------------- growth: a leak?


def test_growth_flags_a_steady_climb_and_not_a_flat_or_noisy_line() -> None:
    flat = [[s, 50 * MiB] for s in range(100, 900, 100)]
    assert not growth(flat).flagged and growth(flat).bytes_per_1000_steps == 0.0
    climb = [[s, 50 * MiB + s * 16384] for s in range(100, 900, 100)]  # 16 KiB a step
    g = growth(climb, 60 * MiB)
    assert g.flagged and g.bytes_per_1000_steps == pytest.approx(16384 * 1000)
    noisy = [[s, 50 * MiB + (3 * MiB if i % 2 else 0)] for i, s in enumerate(range(100, 900, 100))]
    assert not growth(noisy).flagged
    # steady but tiny (an allocator's rounding): under the floor, not a leak
    assert not growth([[s, 50 * MiB + s * 64] for s in range(100, 900, 100)]).flagged
    assert not growth([[1, 1.0], [2, 2.0]]).flagged  # too few readings to tell


# ---------------------------------------------------------------- the worst case of a trial


def test_data_worst_case_is_validated_with_one_line() -> None:
    with pytest.raises(ConfigError, match=r"data.worst_case = 'largest': allowed: auto \| off \| pkg.module:function"):
        config_from_dict({"data": {"worst_case": "largest"}})
    assert config_from_dict({"data": {"worst_case": False}}).data.worst_case == "off"  # YAML's bare off


def test_fixed_shape_data_adds_a_validation_batch_to_the_worst_case() -> None:
    r = run_trial(tiny_config(), {"batch_size": 32, "lr": 0.05})
    assert r.status is Status.OK, r.reason
    assert r.metrics.peak_mem_worst_bytes >= r.metrics.peak_mem_bytes > 0
    assert "data of one shape" in r.info.peak_mem_worst_method and "validation" in r.info.peak_mem_worst_method
    off = run_trial(tiny_config(data={"worst_case": "off"}), {"batch_size": 32, "lr": 0.05})
    # the window's peak is the same training (a few bytes of allocator bookkeeping apart)
    assert off.metrics.peak_mem_worst_bytes is None
    assert off.metrics.peak_mem_bytes == pytest.approx(r.metrics.peak_mem_bytes, rel=0.01)


def test_a_user_hook_names_the_worst_batch_and_a_wrong_one_is_said_plainly() -> None:
    r = run_trial(tiny_config(data={"worst_case": "tests.workloads:larger_images"}), {"batch_size": 32, "lr": 0.05})
    assert r.status is Status.OK, r.reason
    # 48 px against the data's 16 px: nine times the activations
    assert r.metrics.peak_mem_worst_bytes > 2 * r.metrics.peak_mem_bytes
    assert "data.worst_case = tests.workloads:larger_images" in r.info.peak_mem_worst_method
    bad = run_trial(tiny_config(data={"worst_case": "tests.workloads:one_image_short"}), {"batch_size": 32, "lr": 0.05})
    assert bad.status is Status.FAILED
    assert "data.worst_case = 'tests.workloads:one_image_short' returned a batch of 31 samples" in bad.reason


def _varlen(cap: str | None = None, **data: Any) -> Config:
    sets = ["budget.train_samples=512", "budget.warmup_steps=2", "confirm.epochs=1", "confirm.evaluations=4"]
    sets += [f"data.{k}={v}" for k, v in data.items()]
    return load_config(VARLEN, sets + ([f"resources.device_memory={cap}"] if cap else []))


@pytest.mark.slow
def test_a_random_window_underestimates_the_peak_of_variable_length_data() -> None:
    r = run_trial(_varlen(), {"batch_size": 32, "lr": 1e-3})
    assert r.status is Status.OK, r.reason
    # one sequence in 512 is 8x longer: the window's batches (8-32 tokens) miss it, the probe does not
    assert r.metrics.peak_mem_worst_bytes > 2.5 * r.metrics.peak_mem_bytes
    assert "the 32 largest of 4096 samples" in r.info.peak_mem_worst_method


@pytest.mark.slow
def test_without_the_worst_case_a_fitting_config_runs_out_of_memory_later_and_with_it_not() -> None:
    # 48 MiB: batch 32's window (~18 MiB) fits with room to spare, its longest batch (~68 MiB) does not
    off = _varlen("48MiB", worst_case="off")
    chosen = run_trial(off, {"batch_size": 32, "lr": 1e-3})
    assert chosen.status is Status.OK and chosen.metrics.peak_mem_bytes < 0.9 * 48 * MiB  # "fits", with the margin
    later = confirm_run(off, {"batch_size": 32, "lr": 1e-3}, trial_id="c", confirm_of=0)
    assert later.status is Status.OOM and "of a confirmation run" in later.reason
    with_probe = _varlen("48MiB")
    assert run_trial(with_probe, {"batch_size": 32, "lr": 1e-3}).status is Status.OOM  # the probe says so at once
    fits = run_trial(with_probe, {"batch_size": 16, "lr": 1e-3})
    assert fits.status is Status.OK and fits.metrics.peak_mem_worst_bytes <= 0.9 * 48 * MiB
    long = confirm_run(with_probe, {"batch_size": 16, "lr": 1e-3}, trial_id="c", confirm_of=0)
    assert long.status is Status.OK, long.reason
    assert long.metrics.peak_mem_bytes <= fits.metrics.peak_mem_worst_bytes * 1.05


@pytest.mark.slow
def test_no_config_a_search_recommends_runs_out_of_memory_at_length(tmp_path: Path) -> None:
    from tune_batch.pipeline.search import search

    cfg = _varlen("48MiB").model_copy(deep=True)
    cfg = config_from_dict({**cfg.to_dict(), "space": {"batch_size": [16, 32, 64], "lr": {"low": 1e-3, "high": 1e-3},
                                                       "num_gpus": [1], "min_batch_per_gpu": 16},
                            "search": {"backend": "optuna", "sampler": "random", "seed": 0},
                            "budget": {**cfg.budget.model_dump(), "trials": 3}, "repeats": {"seeds": 0}})
    res = search(cfg, tmp_path / "run", quiet=True)
    assert res.recommended is not None
    p = res.recommended.params
    later = confirm_run(cfg, {"batch_size": p.batch_size, "lr": p.lr}, trial_id="c", confirm_of=0)
    assert later.status is Status.OK, later.reason


# ---------------------------------------------------------------- a confirmation run, watched


@pytest.mark.slow
def test_a_confirmation_run_records_its_memory_and_a_leak_is_flagged() -> None:
    cfg = tiny_config(confirm={"train_samples": 2048, "evaluations": 4})
    r = confirm_run(cfg, {"batch_size": 16, "lr": 0.05}, trial_id="0c0", confirm_of=0)
    assert r.status is Status.OK, r.reason
    assert r.metrics.peak_mem_bytes > 0 and len(r.info.memory_quarters_bytes) == 4
    assert not r.info.memory_growth["flagged"] and r.info.memory_growth["bytes_per_1000_steps"] == 0.0
    leaky = tiny_config(model={"name": "tests.workloads:leaky", "kwargs": {"kib_per_step": 64}},
                        confirm={"train_samples": 2048, "evaluations": 4})
    r = confirm_run(leaky, {"batch_size": 16, "lr": 0.05}, trial_id="0c0", confirm_of=0)
    g = r.info.memory_growth
    assert g["flagged"] and g["bytes_per_1000_steps"] == pytest.approx(64 * 1024 * 1000, rel=0.05)
    q = r.info.memory_quarters_bytes
    assert q[-1] - q[0] > 4 * MiB  # 64 KiB kept at each of 96 steps between the first quarter and the last


def test_a_run_with_many_evaluations_reads_the_kept_memory_a_few_times_and_still_finds_a_leak() -> None:
    """Each reading is a full garbage collection (a third of a second in a loaded process): 32
    evaluations read it at 8 of them (and the watch at the 4 quarter ends), the last always."""
    assert [i for i in range(32) if kept_reading_at(i, 32)] == [3, 7, 11, 15, 19, 23, 27, 31]
    assert [i for i in range(5) if kept_reading_at(i, 5)] == [0, 1, 2, 3, 4]
    plan = EvalPlan(every=5, total=22, metric="val_acc")  # a trainer's evaluations: 5, 10, 15, 20, 22
    assert plan.count == 5 and [plan.index(s) for s in (5, 10, 15, 20, 22)] == [0, 1, 2, 3, 4]
    leaky = tiny_config(model={"name": "tests.workloads:leaky", "kwargs": {"kib_per_step": 64}},
                        confirm={"train_samples": 2048, "evaluations": 32})
    r = confirm_run(leaky, {"batch_size": 16, "lr": 0.05}, trial_id="0c0", confirm_of=0)
    assert r.status is Status.OK, r.reason
    steps = [k[0] for k in r.info.memory_kept_bytes]
    assert len(r.info.curve) == 32 and 8 <= len(steps) <= 12 and steps[-1] == 128
    g = r.info.memory_growth
    assert g["flagged"] and g["bytes_per_1000_steps"] == pytest.approx(64 * 1024 * 1000, rel=0.05)


@pytest.mark.slow
def test_a_leaking_config_is_not_recommended_silently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tune_batch.pipeline.search import search

    cfg = tiny_config(model={"name": "tests.workloads:leaky", "kwargs": {"kib_per_step": 64}}, objectives=OBJ,
                      search={"backend": "optuna", "seed": 0}, budget={"trials": 3},
                      confirm={"candidates": 2, "seeds": 1, "train_samples": 2048, "evaluations": 4, "target": 0.5})
    res = search(cfg, tmp_path / "run")
    out = capsys.readouterr().out
    assert res.recommended is not None
    assert "per 1000 steps in its confirmation runs: a leak?" in out.split("recommended:")[1]
    rec = json.loads((tmp_path / "run" / "pareto.json").read_text())["recommended"]
    assert rec["memory_growth"]["flagged"] and rec["peak_mem_worst_bytes"] > 0


# ---------------------------------------------------------------- the margin of the answer


def _rec(tid: int, b: int, sps: float, acc: float, worst_mib: float) -> TrialResult:
    return TrialResult.from_record({
        "trial_id": tid, "params": {"batch_size": b, "lr": 0.01, "num_gpus": 1}, "status": "ok",
        "metrics": {"samples_per_s": sps, "val_acc": acc, "peak_mem_bytes": worst_mib * MiB / 2,
                    "peak_mem_worst_bytes": worst_mib * MiB},
        "info": {"seed": 0, "chance_acc": 0.1, "device": "cpu (2 threads)"}})


def test_the_recommendation_keeps_the_memory_margin_and_the_files_say_so(tmp_path: Path) -> None:
    cfg = tiny_config(objectives=OBJ, resources={"device_memory": "100MiB"})
    # trial 0 is best in both objectives, but its worst case (95 MiB) leaves 5 % of the cap
    records = [_rec(0, 64, 1000, 0.95, 95), _rec(1, 16, 500, 0.92, 40), _rec(2, 32, 700, 0.90, 60)]
    report = build_report(cfg, records)
    assert [r.trial_id for r in report.front] == [0]
    assert report.recommended.trial_id == 1 and report.recommended_on_front is False
    want = "trial 0 not recommended: its worst-case peak 95.0 MiB leaves 5% of the cap"
    assert any(want in n for n in texts(report.notes))
    summary = render_summary(report)
    assert "memory: worst-case peak 40.0 MiB on cpu (2 threads), 60% under the cap (resources.device_memory) of " \
           "100.0 MiB (keeps resources.memory_margin 10%)" in summary
    write_files(report, tmp_path)
    best = (tmp_path / "best.yaml").read_text()
    memory = yaml.safe_load(next(line for line in best.splitlines() if line.startswith("# memory_safety: "))
                       [len("# memory_safety: "):])
    assert memory["peak_mem_worst_bytes"] == 40 * MiB and memory["memory_margin"] == pytest.approx(0.6)
    assert memory["measured_on"] == "cpu (2 threads)" and memory["memory_limit_bytes"] == 100 * MiB
    rec = json.loads((tmp_path / "pareto.json").read_text())["recommended"]
    assert rec["trial_id"] == 1 and rec["peak_mem_worst_bytes"] == 40 * MiB
    assert rec["memory_margin"] == pytest.approx(0.6) and rec["measured_on"] == "cpu (2 threads)"
    # a margin nothing keeps: no recommendation, said so
    tight = build_report(tiny_config(objectives=OBJ, resources={"device_memory": "100MiB", "memory_margin": 0.7}),
                         records)
    assert tight.recommended is None and any("no measured config leaves" in n for n in texts(tight.notes))


def test_a_config_over_the_margin_is_not_chosen_from_the_confirmed_candidates() -> None:
    from tests.test_confirm import _curve
    from tune_batch.decide.recommend import decide

    cfg = tiny_config(objectives=OBJ, resources={"device_memory": "100MiB"})
    short = [_rec(0, 64, 1000, 0.90, 50), _rec(1, 16, 600, 0.95, 40)]

    def run(tid: str, of: int, b: int, step_s: float, worst_mib: float) -> TrialResult:
        r = _rec(0, b, 1000, 0.97, worst_mib)
        info = {**r.info.to_dict(), "confirm_of": of, "curve": _curve([0.3, 0.6, 0.8, 0.97], step_s=step_s)}
        return TrialResult.from_record({**r.to_record(), "trial_id": tid, "info": info})

    # trial 0 reaches the target first, but its confirmation run's worst case went to 97 MiB
    report = decide(cfg, [*short, run("0c0", 0, 64, 1.0, 97), run("1c0", 1, 16, 2.0, 40)])
    assert report.recommended.trial_id == 1
    assert "not recommended: its worst-case peak 97.0 MiB" in "\n".join(render_summary(report).splitlines())


# ---------------------------------------------------------------- other tenants of a GPU (NVML mocked)


def test_other_processes_memory_on_the_gpu_is_taken_from_the_usable_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from tune_batch.measure import tenants
    from tune_batch.trial import setup

    calls: dict[str, Any] = {}

    class Props:
        total_memory = 80 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: Props())
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: None)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.setdefault("fraction", f))
    monkeypatch.setattr(tenants, "others_bytes", lambda i: (20 * 2**30, None))
    cap = setup.apply_memory_cap(tiny_config(), torch.device("cuda", 0))
    assert cap.limit_bytes == 60 * 2**30 and cap.others_bytes == 20 * 2**30 and calls["fraction"] == 0.75
    calls.clear()  # a cap under what the others leave is the limit
    cap = setup.apply_memory_cap(tiny_config(resources={"device_memory": "24GiB"}), torch.device("cuda", 0))
    assert cap.limit_bytes == 24 * 2**30 and calls["fraction"] == pytest.approx(0.3)
    assert tenants.usable_bytes(80, None, None) == 80 and tenants.usable_bytes(80, 100, 30) == 50


def test_nvml_unavailable_leaves_the_usable_memory_unknown_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from tune_batch.errors import DeviceMonitorError
    from tune_batch.measure import nvml, tenants

    def broken(indices: list[int]) -> None:
        raise DeviceMonitorError("NVML could not open the trial's GPUs [0]: no driver")

    monkeypatch.setattr(nvml, "NvmlReader", broken)
    assert tenants.others_bytes(0) == (None, "other processes' memory not read: NVML could not open the trial's GPUs "
                                             "[0]: no driver")


# ---------------------------------------------------------------- restore what the process had


@pytest.mark.slow
def test_no_trial_leaves_memory_allocated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tune_batch.cli import main
    from tune_batch.pipeline.max_batch import max_batch
    from tune_batch.pipeline.search import search

    cfg = tiny_config(search={"backend": "optuna"}, budget={"trials": 2}, resources={"device_memory": "40MiB"})

    def one_round(k: int) -> int:  # every way a process runs trials, one after another
        run_trial(cfg, {"batch_size": 32, "lr": 0.05})
        confirm_run(cfg.model_copy(update={"confirm": cfg.confirm.model_copy(update={"train_samples": 256})}),
                    {"batch_size": 32, "lr": 0.05}, trial_id="c", confirm_of=0)
        max_batch(cfg)
        search(cfg, tmp_path / f"run{k}", quiet=True)
        assert main(["probe", str(REPO / "configs/quickstart.yaml"), "--batch-size", "16", "--lr", "0.01", "--set",
                     "budget.train_samples=256", "--set", "data.resize=16", "--output", str(tmp_path / f"p{k}")]) == 0
        capsys.readouterr()
        return live_tensor_bytes("cpu")

    before = live_tensor_bytes("cpu")
    after = one_round(1)
    # nothing a trial built (data, model, optimizer state, batches) is still alive afterwards
    assert after == before, (before, after)
    import torch

    kept = [torch.ones(MiB, dtype=torch.uint8)]  # the reading sees what is kept
    assert live_tensor_bytes("cpu") == before + MiB and kept


def test_live_tensor_bytes_passes_over_fake_tensors_a_compile_leaves_reachable() -> None:
    # torch.compile leaves tensors without a data pointer reachable in the process (FakeTensors):
    # every later count (a confirmation run's memory watch) must pass over them
    import torch

    compiled = torch.compile(torch.nn.Linear(8, 8))
    compiled(torch.randn(4, 8)).sum().backward()
    assert live_tensor_bytes() > 0


@pytest.mark.slow
def test_readings_inside_a_run_freeze_the_heap_and_see_the_same_bytes_as_whole_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a run's first reading the heap is frozen, so the later ones collect and scan only
    what the run made; the bytes are those of a whole-heap reading: a tensor kept before the
    freeze and freed after it leaves the count, one appended to an old list enters it, cyclic
    garbage made after it does not; the heap is unfrozen when the run ends, and a freeze that
    was there before is left alone."""
    import gc

    import torch

    from tune_batch.measure import memory

    cpu = torch.device("cpu")
    old, kept_list = torch.ones(MiB, dtype=torch.uint8), []
    with memory.kept_scope():
        first = memory.kept_bytes(cpu)
        assert gc.get_freeze_count() > 0
        kept_list.append(torch.ones(2 * MiB, dtype=torch.uint8))

        class Node:
            pass

        node = Node()
        node.me, node.t = node, torch.ones(4 * MiB, dtype=torch.uint8)  # a cycle: garbage once dropped
        del node
        assert memory.kept_bytes(cpu) - first == 2 * MiB
        del old
        assert memory.kept_bytes(cpu) - first == MiB
    assert gc.get_freeze_count() == 0
    assert kept_list

    # a leaking run records the same kept memory either way
    leaky = tiny_config(model={"name": "tests.workloads:leaky", "kwargs": {"kib_per_step": 64}},
                        confirm={"train_samples": 1024, "evaluations": 4})
    runs = []
    for freeze in (True, False):
        monkeypatch.setattr(memory, "FREEZE", freeze)
        r = confirm_run(leaky, {"batch_size": 16, "lr": 0.05}, trial_id="0c0", confirm_of=0)
        assert r.status is Status.OK, r.reason
        runs.append(r.info.memory_kept_bytes)
    assert runs[0] == runs[1] and runs[0][-1][1] - runs[0][0][1] >= 32 * 64 * 1024

    gc.freeze()  # someone else's freeze: the scope reads the whole heap and leaves it frozen
    try:
        n, made = gc.get_freeze_count(), torch.ones(MiB, dtype=torch.uint8)
        with memory.kept_scope():
            assert memory.kept_bytes(cpu) >= MiB and made.numel()
        assert gc.get_freeze_count() > n // 2  # still frozen (less what refcounting freed meanwhile)
    finally:
        gc.unfreeze()


@pytest.mark.slow
def test_a_search_collects_on_a_settled_heap_and_its_readings_see_the_same_bytes(tmp_path: Path) -> None:
    """The collection after each run walks only what the runs made: an in-process search freezes
    the heap as it stands for its duration (before, each trial's two full collections walked half
    a million objects, 0.3 s each, longer than a small trial's training); the kept-memory readings
    on it still count the tensors that were there before; the heap is unfrozen at the end."""
    import gc

    import torch

    from tests import workloads
    from tune_batch.measure import memory
    from tune_batch.pipeline.search import search

    cpu = torch.device("cpu")
    old = torch.ones(MiB, dtype=torch.uint8)
    with memory.settled_heap():
        assert gc.get_freeze_count() > 0
        with memory.kept_scope():
            first = memory.kept_bytes(cpu)
            kept = torch.ones(2 * MiB, dtype=torch.uint8)
            assert memory.kept_bytes(cpu) - first == 2 * MiB
            del old  # a tensor from before the freeze, freed: it leaves the count
            assert memory.kept_bytes(cpu) - first == MiB
        assert gc.get_freeze_count() > 0  # the scope leaves the settled heap frozen
    assert gc.get_freeze_count() == 0 and kept.numel()

    # a leaking run records the same kept memory on a settled heap as on a whole one
    leaky = tiny_config(model={"name": "tests.workloads:leaky", "kwargs": {"kib_per_step": 64}},
                        confirm={"train_samples": 1024, "evaluations": 4})
    runs = []
    for settled in (True, False):
        with memory.settled_heap() if settled else contextlib.nullcontext():
            r = confirm_run(leaky, {"batch_size": 16, "lr": 0.05}, trial_id="0c0", confirm_of=0)
        assert r.status is Status.OK, r.reason
        runs.append(r.info.memory_kept_bytes)
    assert runs[0] == runs[1] and runs[0][-1][1] - runs[0][0][1] >= 32 * 64 * 1024

    workloads.FREEZE_SEEN.clear()
    cfg = tiny_config(model={"name": "tests.workloads:freeze_seen"}, search={"backend": "optuna"},
                      budget={"trials": 2, "train_samples": 256})
    search(cfg, tmp_path / "run", quiet=True)
    # each of the 2 trials built its model on the frozen heap (the checks before the search built one too)
    assert sum(n > 100_000 for n in workloads.FREEZE_SEEN) >= 2, workloads.FREEZE_SEEN
    assert gc.get_freeze_count() == 0
