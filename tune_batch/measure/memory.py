"""Tensor memory of one training step on the CPU, from torch's memory profiler.

The profiler records every allocation and free of the step (activations, gradients, optimizer
state, inputs); the peak of their running total is what a GPU allocator's peak statistic
would show: tensor bytes, free of allocator and page noise. Uses
``torch.profiler._memory_profiler`` (private to torch, pinned by the project's torch range).
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any


@contextlib.contextmanager
def _kineto_errors_only() -> Iterator[None]:
    """kineto (the profiler's C++ side) logs every start and stop; keep errors only, for the
    duration (the user's own setting wins; the variable is restored afterwards)."""
    before = os.environ.get("KINETO_LOG_LEVEL")
    if before is None:
        os.environ["KINETO_LOG_LEVEL"] = "5"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KINETO_LOG_LEVEL", None)


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence C++ writes to fd 2 (kineto's start/stop lines) for the duration; Python
    exceptions are unaffected, and fd 2 is restored in ``finally``."""
    with _kineto_errors_only():
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):
            yield
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)


class StepPeak:
    """The memory profiler around one step whose start and end are separate calls (a trainer's
    callback hooks): ``start()``, the step, then ``stop()`` returns its peak tensor bytes on the CPU.
    The profiler does not change what the step computes."""

    def __init__(self) -> None:
        self._quiet: contextlib.ExitStack | None = None
        self._prof: Any = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._quiet = contextlib.ExitStack()
        self._quiet.enter_context(quiet_native_stderr())
        self._prof = self._quiet.enter_context(
            profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True))

    def stop(self) -> int:
        import torch
        from torch.profiler._memory_profiler import MemoryProfileTimeline

        assert self._quiet is not None, "stop() before start()"
        quiet, self._quiet = self._quiet, None
        quiet.close()  # leaves the profiler (it has recorded the step), then puts fd 2 back
        timeline = MemoryProfileTimeline(_totals_profile(self._prof.profiler.kineto_results))
        _, sizes = timeline._coalesce_timeline(torch.device("cpu"))
        return int(max((sum(s) for s in sizes), default=0))

    def cancel(self) -> None:
        """Leave the profiler without reading it (the step raised)."""
        if self._quiet is not None:
            quiet, self._quiet = self._quiet, None
            quiet.close()


def _totals_profile(result: Any) -> Any:
    """torch's ``MemoryProfile`` of a profiled step, with only what its timeline's totals need.

    The timeline lists every tensor the step allocated, freed or found already there: from the op
    tree, its data flow graph, the tensors' sizes, and the tensors the Python tracer saw as a
    module's parameters, their gradients and an optimizer's state (these can be untouched by any
    op of the step and still be counted). The rest of torch's analysis sorts tensors into
    categories (inputs, activations, parameters found by data flow, autograd detail): it decides
    which category a tensor's bytes are drawn in, never whether they are counted, and it was a
    quarter of the analysis's seconds. ``scripts/bench_step_peak.py`` compares both ways."""
    from torch.profiler import _memory_profiler as mp

    profile = mp.MemoryProfile.__new__(mp.MemoryProfile)
    profile._op_tree = mp.OpTree(result)
    profile._data_flow_graph = mp.DataFlowGraph(profile._op_tree)
    profile._size_map = mp.SizeMap(profile._op_tree)
    profile._categories = mp.CategoryDict()
    profile._set_gradients_and_temporaries()
    profile._set_parameters_using_python_tracer()
    profile._set_optimizer_state()
    return profile


def step_peak_bytes(step: Callable[[], None]) -> int:
    """Run ``step`` once under the memory profiler; return its peak tensor bytes on the CPU."""
    peak = StepPeak()
    peak.start()
    try:
        step()
    except BaseException:
        peak.cancel()
        raise
    return peak.stop()


def _tensors(objects: list[Any]) -> list[Any]:
    import warnings

    import torch

    with warnings.catch_warnings():  # a deprecated torch object warns when its class is looked at
        warnings.simplefilter("ignore")
        return [o for o in objects if isinstance(o, torch.Tensor)]


def _storage_bytes(tensors: Iterable[Any], device_type: str) -> int:
    storages: dict[int, int] = {}
    for obj in tensors:
        if obj.device.type == device_type:
            try:
                s = obj.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
            except (RuntimeError, NotImplementedError):
                # sparse, nested and other storage-less layouts; the fake tensors a torch.compile
                # left reachable have a storage but no data pointer (they hold no memory)
                continue
    return sum(storages.values())


def _collect(scan: bool = True) -> list[Any]:
    """A garbage collection, then the tensors the collector still tracks (frozen objects are not
    among them); without ``scan`` none are looked for."""
    import gc

    gc.collect()
    return _tensors(gc.get_objects()) if scan else []


def live_tensor_bytes(device_type: str = "cpu") -> int:
    """Bytes of the distinct storages of every tensor on ``device_type`` that Python can reach,
    after a garbage collection: the tensor memory a process keeps, free of allocator noise (memory
    held only inside C++, such as an autograd graph's saved tensors, is not seen)."""
    return _storage_bytes(_collect(), device_type)


class _Scope:
    """The state of the kept-memory readings of the run in progress (``kept_scope``)."""

    depth = 0  # open scopes
    froze = False  # whether this scope froze the heap (and unfreezes it at its end)
    full = False  # the heap could not be frozen: every reading collects and scans all of it
    old: list[weakref.ref[Any]] = []  # the tensors that were alive when the heap was frozen


#: Whether readings inside a ``kept_scope`` freeze the heap after the first one (off: every
#: reading collects and scans the whole heap, as outside a scope; for comparing the two, also
#: in a search's worker processes: ``TUNE_BATCH_KEPT_FREEZE=0``).
FREEZE = os.environ.get("TUNE_BATCH_KEPT_FREEZE", "1") != "0"


@contextlib.contextmanager
def kept_scope() -> Iterator[None]:
    """Makes the kept-memory readings of one run cheap after its first. A reading is a garbage
    collection (and on a CPU a scan of every object for tensors): 0.3-0.4 s in a process that has
    torch, Ray and Lightning loaded (over half a million objects), most of them imported modules
    that no run changes. The first reading inside the scope collects and scans all of them, keeps
    weak references to the tensors it found, and freezes what survived (``gc.freeze``); the later
    readings collect and scan only the objects created since, plus those tensors while they live:
    the same bytes. The heap is unfrozen when the scope ends (a cycle among the frozen objects
    that became garbage during the run is collected then). Where something else had frozen part
    of the heap, or collection is off, readings stay whole."""
    import gc

    _Scope.depth += 1
    try:
        yield
    finally:
        _Scope.depth -= 1
        if _Scope.depth == 0:
            if _Scope.froze:
                gc.unfreeze()
            _Scope.froze, _Scope.full, _Scope.old = False, False, []


def _scoped_collect(scan: bool) -> list[Any] | None:
    """A reading's collection inside a scope: the first one collects the whole heap, remembers its
    tensors and freezes it, the later ones collect what the run created since. The tensors alive
    (``scan``; else an empty list), or None where this scope reads the whole heap (nothing done)."""
    import gc

    if _Scope.full or not FREEZE:
        return None
    if not _Scope.froze:
        if gc.get_freeze_count() or not gc.isenabled():
            _Scope.full = True
            return None
        tensors = _collect(scan)
        try:
            old = [weakref.ref(t) for t in tensors]
        except TypeError:  # a tensor type without weak references: the scope's readings stay whole
            _Scope.full = True
            return tensors
        _Scope.old, _Scope.froze = old, True
        gc.freeze()
        return tensors
    # (the weak references are of a scanning scope's tensors only: none where ``scan`` is off)
    return [*_collect(scan), *(t for t in (r() for r in _Scope.old) if t is not None)]


#: The most readings of the kept memory a run takes at its evaluations. A reading of the whole
#: heap is a full garbage collection (and, on a CPU, a walk over every Python object): 0.15-0.45 s
#: in a process that has torch, Ray and Lightning loaded, which made 32 readings 12.6 of a 16.5 s
#: confirmation run's wall (2.7 s of training); inside a ``kept_scope`` only the first one is.
#: Eight points spread over the run fit the growth line as well.
KEPT_READINGS = 8


def kept_reading_at(i: int, n: int) -> bool:
    """Whether the ``i``-th (0-based) of a run's ``n`` evaluations reads the kept memory: at most
    ``KEPT_READINGS`` of them, evenly strided, the last one always."""
    stride = -(-n // KEPT_READINGS)
    return (n - 1 - i) % stride == 0


def kept_bytes(device: Any) -> float:
    """The tensor memory a process keeps between steps (after a garbage collection): CUDA's
    allocated bytes, or the bytes of the tensors Python can reach on a CPU."""
    import gc

    import torch

    cuda = device.type == "cuda"
    tensors = _scoped_collect(scan=not cuda) if _Scope.depth else None
    if cuda:
        if tensors is None:
            gc.collect()
        return float(torch.cuda.memory_allocated(device))
    return float(_storage_bytes(tensors, device.type) if tensors is not None else live_tensor_bytes(device.type))
