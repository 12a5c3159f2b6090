from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_config
from tune_batch.measure.oom import MemoryCapExceeded, cap_bytes, is_oom_error


@pytest.mark.parametrize("exc", [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                 "you tried to allocate 1000000 bytes."),
    MemoryError(),
    MemoryCapExceeded(10, 5),
])
def test_oom_errors_are_recognised(exc: BaseException) -> None:
    assert is_oom_error(exc)


@pytest.mark.parametrize("exc", [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied"),
    ValueError("out of range"),
    KeyError("memory"),
    TypeError("bad"),
])
def test_other_errors_are_not_oom(exc: BaseException) -> None:
    assert not is_oom_error(exc)


def test_oom_wrapped_in_another_error_is_found() -> None:
    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        except torch.OutOfMemoryError as inner:
            raise RuntimeError("worker failed") from inner
    except RuntimeError as outer:
        assert is_oom_error(outer)


def test_real_cpu_allocation_failure_is_oom() -> None:
    with pytest.raises(RuntimeError) as info:
        torch.empty(2**62, dtype=torch.uint8)
    assert is_oom_error(info.value)


def test_cap_bytes() -> None:
    assert cap_bytes(None, 100) is None
    assert cap_bytes("2MiB", None) == 2 * 2**20
    assert cap_bytes(2**30, None) == 2**30  # a plain byte count
    assert cap_bytes(0.5, 1000) == 500
    assert cap_bytes(0.5, None) is None


def test_a_learning_rate_past_a_divergence_is_skipped_at_that_batch_size() -> None:
    from tune_batch.analysis import objectives
    from tune_batch.store.records import Params, Status, TrialResult
    from tune_batch.study.admission import Policy

    policy = Policy(tiny_config(space={"batch_size": [16, 32, 64]}))
    policy.observe(TrialResult(7, Params(32, 0.1, 1), Status.DIVERGED, "non-finite loss at step 3"))
    skip = policy.skip(Params(32, 0.2, 1), 8)
    assert skip is not None and skip.reason.startswith("diverged: lr 0.2 >= 0.1") and "trial 7" in skip.reason
    # told to the sampler as the learning-rate boundary, not as memory
    assert objectives.constraints(skip) == {"memory": 0.0, "space": 0.0, "diverged": 1.0}
    assert policy.skip(Params(32, 0.05, 1), 9) is None  # below it: run
    assert policy.skip(Params(64, 0.2, 1), 10) is None  # another batch size may tolerate it
    off = Policy(tiny_config(resources={"feasibility_model": False}))
    off.observe(TrialResult(7, Params(32, 0.1, 1), Status.DIVERGED, "non-finite loss"))
    assert off.skip(Params(32, 0.2, 1), 8) is None
