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

        assert self._quiet is not None, "stop() before start()"
        quiet, self._quiet = self._quiet, None
        quiet.close()  # leaves the profiler (it has recorded the step), then puts fd 2 back
        return _profile_peak(self._prof.profiler.kineto_results, torch.device("cpu"))

    def cancel(self) -> None:
        """Leave the profiler without reading it (the step raised)."""
        if self._quiet is not None:
            quiet, self._quiet = self._quiet, None
            quiet.close()


def _key(t: Any) -> tuple | None:
    """A storage as torch's memory analysis keys it (``TensorKey``): tensor id, data pointer,
    allocation id, device; None where the profiler did not assign all of them."""
    if t is None or t.id is None or t.allocation_id is None:
        return None
    ptr = t.ptr if hasattr(t, "alloc_size") else t.storage_data_ptr
    return None if ptr is None else (t.id, ptr, t.allocation_id, t.device)


def _seen(result: Any) -> tuple[dict, list]:
    """One walk over a profiled step's event tree: the bytes of every storage an op's inputs or
    the Python tracer showed (a module's parameters and gradients, an optimizer's parameters,
    gradients and state), and the allocation events in time order."""
    import torch
    from torch._C._profiler import _EventType, _TensorMetadata
    from torch._utils import _element_size

    shown: dict[tuple, int] = {}
    allocs: list[tuple[int, Any]] = []

    def show(t: Any) -> None:
        key = _key(t)
        if key is not None:
            n = 0
            if t.layout == torch.strided:  # a view's extent: its largest size x stride
                n = max(a * b for a, b in zip(t.sizes or [1], t.strides or [1], strict=True)) * _element_size(t.dtype)
            shown[key] = max(shown.get(key, 0), n)

    stack = list(result.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        kind, fields = event.typed
        if kind == _EventType.TorchOp:
            for i in fields.inputs:
                for t in i if isinstance(i, list) else [i]:
                    if isinstance(t, _TensorMetadata):
                        show(t)
        elif kind == _EventType.PyCall:
            for _, p, grad in fields.module.parameters if fields.module is not None else ():
                show(p)
                show(grad)
            for p, grad, state in fields.optimizer.parameters if fields.optimizer is not None else ():
                show(p)
                show(grad)
                for _, t in state:
                    show(t)
        elif kind == _EventType.Allocation:
            allocs.append((event.start_time_ns, fields))
    allocs.sort(key=lambda a: a[0])
    return shown, allocs


def _profile_peak(result: Any, device: Any) -> int:
    """The peak of the live tensor bytes on ``device`` during a profiled step: the total that
    torch's memory timeline (``MemoryProfileTimeline``) reaches, read from one walk of the events.

    That timeline counts every storage the step's ops or the Python tracer saw and the step did not
    allocate as there from the start (at the largest extent any view of it showed, or its
    allocation's size where a free of it was recorded), adds each allocation's bytes when it
    happened and takes each free's away, and reads the totals once per microsecond. Its data flow
    graph and categories only version and label those bytes: they change no total, and were most
    of its seconds (``scripts/bench_step_peak.py`` reads the same steps both ways)."""
    shown, allocs = _seen(result)
    size: dict[tuple, int] = {}  # an allocated storage's bytes, from its first event
    created: set[tuple] = set()
    for _, a in allocs:
        key = _key(a)
        if key is not None:
            size.setdefault(key, abs(a.alloc_size))
            if a.alloc_size > 0:
                created.add(key)
    change: dict[int, int] = {-1: 0}  # per microsecond (-1: there from the start)
    live_unkeyed: set[tuple] = set()
    for t, a in allocs:
        if a.device != device:
            continue
        us, key = int(t / 1000), _key(a)  # the timeline's own rounding of nanoseconds
        if key is not None:
            delta = size[key] if a.alloc_size > 0 else -size[key] if a.alloc_size < 0 else 0
        elif a.alloc_size > 0:  # an allocation no tensor claimed, counted by its pointer
            delta = 0 if (a.ptr, a.device) in live_unkeyed else a.alloc_size
            live_unkeyed.add((a.ptr, a.device))
        else:  # its free; one whose allocation came before the step was there from the start
            delta = a.alloc_size
            if (a.ptr, a.device) not in live_unkeyed:
                change[-1] -= a.alloc_size
            live_unkeyed.discard((a.ptr, a.device))
        change[us] = change.get(us, 0) + delta
    for key in shown.keys() | size.keys():
        if key[3] == device and key not in created:
            change[-1] += size.get(key, shown.get(key, 0))
    total, peak = 0, 0
    for us in sorted(change):
        total += change[us]
        peak = max(peak, total)
    return peak


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
    import warnings

    storages: dict[int, int] = {}
    with warnings.catch_warnings():  # reading a fake tensor's data pointer warns (or raises, below)
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
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
    ready = False  # the heap is frozen and ``old`` holds its tensors: readings are of what is new
    froze = False  # whether this scope froze the heap (and unfreezes it at its end)
    full = False  # the heap could not be frozen: every reading collects and scans all of it
    old: list[weakref.ref[Any]] = []  # the tensors that were alive when the heap was frozen


class _Settled:
    """The heap ``settled_heap`` froze: the tensors alive then (None: not settled, or they could
    not be referenced weakly)."""

    old: list[weakref.ref[Any]] | None = None


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
    that became garbage during the run is collected then). On a heap ``settled_heap`` froze, every
    reading is of that kind, from the tensors it remembered. Where something else had frozen part
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
            _Scope.ready, _Scope.froze, _Scope.full, _Scope.old = False, False, False, []


def _scoped_collect(scan: bool) -> list[Any] | None:
    """A reading's collection inside a scope: the first one collects the whole heap, remembers its
    tensors and freezes it, the later ones collect what the run created since. The tensors alive
    (``scan``; else an empty list), or None where this scope reads the whole heap (nothing done)."""
    import gc

    if _Scope.full or not FREEZE:
        return None
    if not _Scope.ready:
        if _Settled.old is not None:  # the heap settled_heap froze, its tensors known
            _Scope.old, _Scope.ready = _Settled.old, True
        elif gc.get_freeze_count() or not gc.isenabled():
            _Scope.full = True
            return None
        else:
            tensors, old = _freeze_remembering(scan)
            if old is None:  # a tensor type without weak references: the scope's readings stay whole
                _Scope.full = True
                return tensors
            _Scope.old, _Scope.froze, _Scope.ready = old, True, True
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


def _freeze_remembering(scan: bool = True) -> tuple[list[Any], list[weakref.ref[Any]] | None]:
    """A whole collection, then the heap frozen (``gc.freeze``) with weak references to the
    tensors alive (``scan``): the tensors and those references. None, and nothing frozen, where a
    tensor type cannot be referenced weakly (later readings could not count it)."""
    import gc

    tensors = _collect(scan)
    try:
        old = [weakref.ref(t) for t in tensors]
    except TypeError:
        return tensors, None
    gc.freeze()
    return tensors, old


def _settle() -> bool:
    """``_freeze_remembering`` for ``settled_heap``, where nothing else froze the heap and
    collection is on; whether it froze."""
    import gc

    if gc.get_freeze_count() or not gc.isenabled():
        return False
    _Settled.old = _freeze_remembering()[1]
    return _Settled.old is not None


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """Garbage collections that walk only what the runs make. A full collection walks every object
    the collector tracks: 0.3-0.4 s once torch, Ray or a trainer package is loaded (half a million
    objects, nearly all of them imported modules), and a search collects after every run (so that
    none of its memory carries into the next), besides Python's own collections inside the timed
    windows. Here the heap as it stands is collected once and frozen (``gc.freeze``) for the
    duration, its tensors remembered by weak reference so that the kept-memory readings still count
    them (``kept_scope``); it is unfrozen at the end (a cycle among the frozen objects that became
    garbage meanwhile is collected then). Where something else froze part of the heap, collection
    is off, or a tensor cannot be referenced weakly, nothing is changed."""
    import gc

    if not _settle():
        yield
        return
    try:
        yield
    finally:
        gc.unfreeze()
        _Settled.old = None


def settle_process_heap() -> None:
    """``settled_heap`` for the rest of this process (never unfrozen; a call on a settled heap does
    nothing): for the processes a search starts to run its trials, so that the collection after
    each trial walks what that trial made."""
    if _Settled.old is None:
        _settle()
