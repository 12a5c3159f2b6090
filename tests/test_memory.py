"""Peak memory measured for real, the feasibility model, and max-batch."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_config
from tune_batch.errors import UserError
from tune_batch.measure.cpu import PeakRss
from tune_batch.measure.oom import fit_memory
from tune_batch.pipeline.max_batch import Probe, candidates, find_max_batch, max_batch, render
from tune_batch.store.records import Params, TrialResult
from tune_batch.study.admission import FeasibilityModel

MiB = 2**20


@pytest.mark.parametrize("size_mib", [1, 64, 256])
def test_step_profiler_sees_a_known_allocation_within_10_percent(size_mib: int) -> None:
    from tune_batch.measure.memory import step_peak_bytes

    def step() -> None:
        a = torch.ones(size_mib * MiB // 4)  # float32
        b = a * 2  # a second buffer of the same size, alive with the first: peak = 2 x size
        del a, b

    assert step_peak_bytes(step) == pytest.approx(2 * size_mib * MiB, rel=0.10)


def test_the_step_peak_is_the_total_of_torchs_whole_memory_analysis() -> None:
    """The peak read from one walk of the profiled events is the bytes torch's whole memory
    analysis reads (its data flow graph, categories and timeline), on a step with parameters,
    BatchNorm buffers, a frozen layer, AdamW state and a temporary freed inside it."""
    from torch import nn
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    from tune_batch.measure.memory import _profile_peak, quiet_native_stderr

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                                      nn.Linear(8 * 14 * 14, 10))
            self.frozen = nn.Linear(10, 10).requires_grad_(False)
            self.spare = nn.Parameter(torch.zeros(1 << 16))  # 256 KiB: trained once, then no op touches it
            self.use_spare = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.frozen(self.body(x))
            return out + self.spare[:10] if self.use_spare else out

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        scratch = torch.ones(1 << 18)  # 1 MiB allocated and freed inside the step
        nn.functional.cross_entropy(model(x) + scratch[:10].sum() * 0, y).backward()
        del scratch
        opt.step()

    step()  # AdamW's state exists before the profiled step, as in a run (the spare's too)
    model.use_spare = False  # its parameter and state are seen by the Python tracer only
    with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                        record_shapes=True, with_stack=True) as prof:
        step()

    def peak(p: object) -> int:
        _, sizes = MemoryProfileTimeline(p)._coalesce_timeline(torch.device("cpu"))
        return int(max(sum(s) for s in sizes))

    whole = peak(prof._memory_profile())
    assert whole > 1 << 20  # the scratch buffer and the model's state are in it
    assert _profile_peak(prof.profiler.kineto_results, torch.device("cpu")) == whole


def test_trial_peak_memory_grows_linearly_with_the_batch() -> None:
    from tune_batch.trial import run_trial

    cfg = tiny_config()
    peaks = {b: run_trial(cfg, {"batch_size": b, "lr": 0.05, "num_gpus": 1}, validate=False).metrics.peak_mem_bytes
             for b in (16, 32, 64)}
    fit = fit_memory([(16, peaks[16]), (64, peaks[64])])
    assert fit is not None and fit.slope_bytes > 0
    assert fit.predict(32) == pytest.approx(peaks[32], rel=0.10)  # inside the fitted range: within 10 %


@pytest.mark.parametrize("size_mib", [64, 256])
def test_peak_rss_sees_a_known_allocation_within_10_percent(size_mib: int) -> None:
    with PeakRss() as mem:
        t = torch.ones(size_mib * MiB, dtype=torch.uint8)  # touched pages, not just reserved
        del t
    assert mem.peak_bytes == pytest.approx(size_mib * MiB, rel=0.10)


def test_peak_rss_flags_the_cap() -> None:
    with PeakRss(cap_bytes=32 * MiB) as mem:
        t = torch.ones(64 * MiB, dtype=torch.uint8)
        mem.poll()
        del t
    assert mem.exceeded.is_set()


def _rec(i: int, b: int, status: str, peak: float | None = None, n: int = 1) -> TrialResult:
    return TrialResult.from_record({"trial_id": i, "params": {"batch_size": b, "lr": 0.01, "num_gpus": n},
                                    "status": status, "metrics": {"peak_mem_bytes": peak} if peak is not None else {},
                                    "info": {}})


def _p(b: int, n: int = 1) -> Params:
    return Params(b, 0.01, n)


def test_boundary_skips_batches_at_or_above_an_oom() -> None:
    m = FeasibilityModel()
    m.observe(_rec(4, 128, "oom"))
    assert m.skip_reason(_p(64)) is None
    reason = m.skip_reason(_p(256))
    assert reason is not None and "ran out of memory in trial 4" in reason
    assert m.skip_reason(_p(128)) is not None
    # per worker: 128 over 2 workers is 64 per worker, which has not failed on 2 workers
    assert m.skip_reason(_p(128, 2)) is None


def test_memory_fit_predicts_and_skips_over_the_cap() -> None:
    m = FeasibilityModel(cap=100 * MiB)
    m.observe(_rec(0, 16, "ok", 10 * MiB + 16 * MiB / 4))
    assert m.skip_reason(_p(512)) is None  # one point: no fit yet
    m.observe(_rec(1, 64, "ok", 10 * MiB + 64 * MiB / 4))
    fit = m.fit(1)
    assert fit is not None and fit.predict(256) == pytest.approx(74 * MiB)
    assert m.skip_reason(_p(256)) is None  # 74 MiB < 100 MiB
    # 352 per worker: 98 MiB, just under the cap: it runs (a real OOM would settle it)
    assert m.skip_reason(_p(352)) is None
    reason = m.skip_reason(_p(512))  # 138 MiB > 100 MiB
    assert reason is not None and "predicted peak 138.0 MiB > cap 100.0 MiB" in reason


def test_fit_needs_two_batch_sizes() -> None:
    assert fit_memory([(16, 1.0), (16, 2.0)]) is None
    assert fit_memory([(16, 1.0), (32, 3.0)]).slope_bytes == pytest.approx(2 / 16)


def test_find_max_batch_uses_few_probes_on_a_linear_memory() -> None:
    seen = []

    def probe(b: int) -> Probe:
        seen.append(b)
        peak = 20 * MiB + b * 0.5 * MiB
        return Probe(b, "ok" if peak <= 200 * MiB else "oom", peak, 0.1)

    res = find_max_batch(candidates(16, 4096), 200 * MiB, 0.1, probe)
    # limit 180 MiB -> b <= 320 -> the largest power of two is 256
    assert res.batch_size == 256
    assert len(res.probes) <= 4 and seen[:2] == [16, 32]


def test_max_batch_says_a_probe_that_trained_over_the_limit_does_not_fit() -> None:
    # 512 trained (peak 190 MiB under a 200 MiB cap) but is over the 180 MiB limit: the table said "ok"
    res = find_max_batch(candidates(16, 512), 200 * MiB, 0.1, lambda b: Probe(b, "ok", 20 * MiB + b * MiB / 3, 0.1))
    assert res.batch_size == 256 and any(p.batch_size == 512 for p in res.probes)
    (line,) = [x for x in render(res).splitlines() if "batch_size    512" in x]
    assert "over the limit" in line and ": ok" not in line
    assert all(": ok" in x for x in render(res).splitlines() if x.startswith("  ") and "batch_size    512" not in x)


def test_find_max_batch_when_nothing_fits() -> None:
    res = find_max_batch([16, 32], 10 * MiB, 0.1, lambda b: Probe(b, "oom", None, 0.1, "out of memory"))
    assert res.batch_size is None and "does not fit even at batch_size 16" in res.message


@pytest.mark.slow
def test_max_batch_for_real_on_cpu_under_a_cap() -> None:
    cfg = tiny_config(resources={"device_memory": "40MiB"})
    res = max_batch(cfg)
    assert res.batch_size is not None and res.batch_size >= 16
    assert all(p.peak_mem_bytes is None or p.status != "ok" or p.peak_mem_bytes > 0 for p in res.probes)
    fitting = [p for p in res.probes if p.batch_size == res.batch_size]
    assert fitting and fitting[0].peak_mem_bytes <= 40 * MiB * 0.9


def test_max_batch_on_cpu_needs_a_size_cap() -> None:
    with pytest.raises(UserError, match="needs resources.device_memory as a size"):
        max_batch(tiny_config())
