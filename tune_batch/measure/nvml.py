"""GPU telemetry from NVML (``nvidia-ml-py``, imported as ``pynvml``).

A background thread samples utilization.gpu, memory used and power of exactly the trial's
GPUs at ``interval_s`` (default 20 Hz). NVML errors become DeviceMonitorError with the cause.

``utilization.gpu`` as read by polling is the driver's latest value, averaged over its own
sample period (1/6 s to 1 s by product), so a poll just inside the window still describes time
before it. Where the driver keeps its utilization samples with timestamps
(``nvmlDeviceGetSamples``), ``device_util`` is the mean of the samples whose whole period lies
inside the timed window; the polled mean is kept beside it, and used when there are none.

What utilization.gpu hides (it reads 100 % when one tiny kernel is always running) is shown,
where the GPU has GPU Performance Monitoring (Hopper and newer), by the share of SMs busy
(``sm_active``) and of time any tensor pipe is busy (``tensor_active``) over exactly the window.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tune_batch.errors import DeviceMonitorError


@dataclass(frozen=True)
class GpuSample:
    t_s: float
    util_frac: float
    mem_used_bytes: int
    power_w: float | None
    energy_mj: float | None = None  # the GPU's total-energy counter (millijoules), where it has one


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True)
class GpuWindow:
    """Samples of one window, per GPU. ``device_util`` is the mean over GPUs and samples: of
    the driver's timestamped utilization samples inside the window where there are any
    (``in_window``), else of the polled reads."""

    samples: dict[int, list[GpuSample]]
    in_window: dict[int, list[float]] | None = None
    note: str | None = None
    gpm: dict[int, dict[str, float]] | None = None  # SM / tensor-pipe activity over the window
    gpm_note: str | None = None
    others: dict[int, int] | None = None  # other compute processes seen on the GPUs: pid -> most memory (bytes)
    others_note: str | None = None

    def activity(self, name: str) -> float | None:
        """Mean over GPUs of a GPM activity (``sm_active``, ``tensor_active``), or None."""
        vals = [per[name] for per in (self.gpm or {}).values() if name in per]
        return _mean(vals) if len(vals) == len(self.gpm or {}) else None

    @property
    def polled_util(self) -> float | None:
        return _mean([s.util_frac for per in self.samples.values() for s in per])

    @property
    def device_util(self) -> float | None:
        in_window = _mean([v for per in (self.in_window or {}).values() for v in per])
        return in_window if in_window is not None else self.polled_util

    @property
    def util_method(self) -> str:
        n = sum(len(v) for v in (self.in_window or {}).values())
        if n:
            return f"NVML utilization samples inside the window ({n})"
        why = f"; {self.note}" if self.note else ""
        return f"polled utilization.gpu ({self.n_samples} reads){why}"

    @property
    def energy_j(self) -> float | None:
        """Energy over the window from the total-energy counters, summed over GPUs; None when a
        GPU has no counter."""
        total = 0.0
        for per in self.samples.values():
            e = [s.energy_mj for s in per]
            if len(e) < 2 or e[0] is None or e[-1] is None:
                return None
            total += (e[-1] - e[0]) / 1000.0
        return total if self.samples else None

    @property
    def power_w(self) -> float | None:
        """Mean board power over the window, summed over GPUs; None when a GPU reports none."""
        total = 0.0
        for per in self.samples.values():
            p = [s.power_w for s in per if s.power_w is not None]
            if not p:
                return None
            total += sum(p) / len(p)
        return total if self.samples else None

    @property
    def mem_used_max_bytes(self) -> int | None:
        """The most device memory NVML saw in use on any of the GPUs (CUDA context and other
        processes included, unlike the allocator's peak)."""
        vals = [s.mem_used_bytes for per in self.samples.values() for s in per]
        return max(vals) if vals else None

    @property
    def n_samples(self) -> int:
        return sum(len(v) for v in self.samples.values())

    def telemetry(self) -> dict[str, object]:
        """What a trial record keeps of the window beside ``device_util``."""
        out: dict[str, object] = {"device_util_method": self.util_method, "power_w": self.power_w,
                                  "nvml_mem_used_max_bytes": self.mem_used_max_bytes, "nvml_samples": self.n_samples}
        if self.polled_util is not None:
            out["device_util_polled"] = self.polled_util
        for name in ("sm_active", "tensor_active"):
            if self.activity(name) is not None:
                out[name] = self.activity(name)
        if self.gpm_note:
            out["gpm"] = self.gpm_note
        if self.note and self.device_util is None:
            out["device_util_note"] = self.note
        if self.energy_j is not None:
            out["energy_j"] = self.energy_j
        if self.others is not None:
            out["other_gpu_processes"] = len(self.others)
            out["other_gpu_mem_bytes"] = sum(self.others.values())
        if self.others_note:
            out["other_gpu_note"] = self.others_note
        return out


class NvmlReader:
    """Reads the trial's GPUs through NVML, matched by UUID so that CUDA_VISIBLE_DEVICES (and
    Ray's assignment) is respected. Calling it reads one sample of each GPU; it also reads the
    driver's timestamped utilization samples and GPM activity. NVML errors become
    DeviceMonitorError."""

    def __init__(self, torch_indices: list[int]) -> None:
        try:
            import pynvml
        except ImportError as e:
            raise DeviceMonitorError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from e
        import torch

        self.nvml = pynvml
        self._gpm: dict[int, Any] = {}
        try:
            pynvml.nvmlInit()
            self.handles = {}
            for i in torch_indices:
                uuid = str(torch.cuda.get_device_properties(i).uuid)
                uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
                self.handles[i] = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError as e:
            raise DeviceMonitorError(f"NVML could not open the trial's GPUs {torch_indices}: {e}") from e

    def _optional(self, fn: Callable[[], float]) -> float | None:
        try:
            return float(fn())
        except self.nvml.NVMLError:
            return None

    def __call__(self) -> dict[int, GpuSample]:
        nv, out, now = self.nvml, {}, time.perf_counter()
        try:
            for i, h in self.handles.items():
                util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
                mem = nv.nvmlDeviceGetMemoryInfo(h).used
                power = self._optional(lambda h=h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
                energy = self._optional(lambda h=h: nv.nvmlDeviceGetTotalEnergyConsumption(h))
                out[i] = GpuSample(now, util, int(mem), power, energy)
        except nv.NVMLError as e:
            raise DeviceMonitorError(f"NVML read failed: {e}") from e
        return out

    def util_samples(self, since_s: float) -> dict[int, list[tuple[float, float]]]:
        """The driver's utilization samples since ``since_s`` (host epoch seconds) per GPU, as
        (timestamp s, fraction)."""
        nv, out = self.nvml, {}
        for i, h in self.handles.items():
            try:
                _, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, int(since_s * 1e6))
            except nv.NVMLError as e:
                if "not found" in str(e).lower():  # no sample since then
                    out[i] = []
                    continue
                raise DeviceMonitorError(f"NVML utilization samples unavailable: {e}") from e
            out[i] = [(x.timeStamp / 1e6, x.sampleValue.uiVal / 100.0) for x in samples]
        return out

    def processes(self) -> tuple[dict[int, int], str | None]:
        """Compute processes on the trial's GPUs other than this one: pid -> GPU memory (bytes,
        0 where the driver does not say), and a note where they cannot be told apart (see others_of)."""
        nv, seen = self.nvml, {}
        try:
            for h in self.handles.values():
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    mem = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else 0
                    seen[int(p.pid)] = max(seen.get(int(p.pid), 0), mem)
        except nv.NVMLError as e:
            raise DeviceMonitorError(f"NVML process list unavailable: {e}") from e
        return others_of(seen, os.getpid())

    def _free(self, samples: Any) -> None:
        for x in list(samples):
            try:
                self.nvml.nvmlGpmSampleFree(x)
            except self.nvml.NVMLError:
                pass

    def gpm_begin(self) -> str | None:
        """Take a GPU Performance Monitoring sample of each GPU (Hopper and newer); returns why
        not where GPM is unavailable."""
        nv = self.nvml
        self._gpm.clear()
        try:
            for i, h in self.handles.items():
                if not nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                    return "GPM not supported on this GPU"
                sample = nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(h, sample)
                self._gpm[i] = sample
        except (nv.NVMLError, AttributeError) as e:
            self._free(self._gpm.values())
            self._gpm.clear()
            return f"GPM unavailable: {e}"
        return None

    def _activity(self, i: int, start: Any, end: Any) -> dict[str, float]:
        nv = self.nvml
        nv.nvmlGpmSampleGet(self.handles[i], end)
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(_GPM_METRICS)
        get.sample1, get.sample2 = start, end
        for k, (metric_id, _) in enumerate(_GPM_METRICS):
            get.metrics[k].metricId = metric_id
        nv.nvmlGpmMetricsGet(get)
        return {name: get.metrics[k].value / 100.0 for k, (_, name) in enumerate(_GPM_METRICS)
                if get.metrics[k].nvmlReturn == nv.NVML_SUCCESS}

    def gpm_end(self) -> dict[int, dict[str, float]]:
        """SM and tensor-pipe activity (fractions) between ``gpm_begin`` and now, per GPU."""
        out: dict[int, dict[str, float]] = {}
        ends = []
        try:
            for i, start in self._gpm.items():
                ends.append(self.nvml.nvmlGpmSampleAlloc())
                out[i] = self._activity(i, start, ends[-1])
        except self.nvml.NVMLError as e:
            raise DeviceMonitorError(f"GPM read failed: {e}") from e
        finally:
            self._free([*self._gpm.values(), *ends])
            self._gpm.clear()
        return out


def _gpm_metric_ids() -> list[tuple[int, str]]:
    try:
        import pynvml

        return [(pynvml.NVML_GPM_METRIC_SM_UTIL, "sm_active"), (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, "tensor_active")]
    except (ImportError, AttributeError):
        return []


_GPM_METRICS = _gpm_metric_ids()


def others_of(seen: dict[int, int], me: int) -> tuple[dict[int, int], str | None]:
    """The entries of ``seen`` (pid -> GPU memory) other than this process ``me``; where ``me`` is
    absent (another pid namespace), all but the one using the least memory, with a note."""
    if me in seen or not seen:
        return {p: m for p, m in seen.items() if p != me}, None
    mine = min(seen, key=lambda p: seen[p])
    return ({p: m for p, m in seen.items() if p != mine},
            "NVML's process ids are not this process's (a container): counted all compute processes but one")


def samples_in_window(samples: list[tuple[float, float]], start_s: float, end_s: float) -> tuple[list[float], str | None]:
    """Utilization values whose sample period lies inside [start_s, end_s]. The period is the
    median gap between the driver's timestamps (each sample describes the period ending at its
    timestamp). Returns the values and, when none fit, why."""
    ts = sorted(samples)
    if len(ts) < 2:
        return [], "too few NVML utilization samples"
    gaps = sorted(b[0] - a[0] for a, b in zip(ts, ts[1:]))
    period = gaps[len(gaps) // 2]
    slack = 0.1 * period
    inside = [v for t, v in ts if t - period >= start_s - slack and t <= end_s + slack]
    if inside:
        return inside, None
    if not any(start_s - 10 <= t <= end_s + 10 for t, _ in ts):
        return [], "NVML sample timestamps are not on the host clock"
    return [], f"window ({end_s - start_s:.2f} s) shorter than NVML's sample period ({period:.2f} s)"


class GpuSampler:
    """Samples in a thread between ``__enter__`` and ``__exit__``; ``window`` holds the result.

    ``reader`` can be given to replay recorded samples (tests without a GPU).
    """

    def __init__(self, torch_indices: list[int], interval_s: float = 0.05,
                 reader: Callable[[], dict[int, GpuSample]] | None = None) -> None:
        self._read = reader or NvmlReader(torch_indices)
        self._util_samples = getattr(self._read, "util_samples", None)
        self._gpm_begin = getattr(self._read, "gpm_begin", None)
        self._gpm_end = getattr(self._read, "gpm_end", None)
        self._gpm_note: str | None = None if self._gpm_begin else "GPM not read"
        self._gpm: dict[int, dict[str, float]] | None = None
        self._processes = getattr(self._read, "processes", None)
        self._others: dict[int, int] | None = None if self._processes is None else {}
        self._others_note: str | None = None if self._processes is not None else "other GPU processes not read"
        self._marks: list[tuple[float, float]] = []  # (perf_counter, epoch) at the window's edges
        self.interval_s = interval_s
        self._samples: dict[int, list[GpuSample]] = {i: [] for i in torch_indices}
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tune_batch-nvml", daemon=True)
        self.window: GpuWindow | None = None

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                for i, s in self._read().items():
                    self._samples.setdefault(i, []).append(s)
            except BaseException as e:  # keep it for the caller's thread
                self._error = e
                return
            n += 1
            if len(self._marks) == 1 and n % 10 == 0:  # inside the window, twice a second at 20 Hz
                self._see_others()
            self._stop.wait(self.interval_s)

    def _see_others(self) -> None:
        """Adds the GPUs' other compute processes now (a failure is noted, never fails the trial)."""
        if self._processes is None or self._others is None:
            return
        try:
            found, note = self._processes()
        except Exception as e:
            self._others, self._others_note = None, str(e) if isinstance(e, DeviceMonitorError) else f"NVML process list unavailable: {e}"
            return
        for pid, mem in found.items():
            self._others[pid] = max(self._others.get(pid, 0), mem)
        self._others_note = self._others_note or note

    def mark_start(self) -> None:
        """The timed window starts now (after the device was synchronised)."""
        if self._gpm_begin is not None:
            try:  # optional telemetry: a failure is noted in the record, never fails the trial
                self._gpm_note = self._gpm_begin()
            except Exception as e:
                self._gpm_note = f"GPM unavailable: {type(e).__name__}: {e}"
        self._marks = [(time.perf_counter(), time.time())]
        self._see_others()

    def mark_end(self) -> None:
        """The timed window ended now: polled reads outside it are dropped."""
        self._see_others()
        self._marks.append((time.perf_counter(), time.time()))
        if self._gpm_end is not None and self._gpm_note is None:
            try:
                self._gpm = self._gpm_end()
            except Exception as e:  # optional telemetry, as above
                self._gpm_note = str(e) if isinstance(e, DeviceMonitorError) else f"GPM read failed: {type(e).__name__}: {e}"

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        samples, in_window, note = self._samples, None, None
        if self._error is not None:  # what was read before the error still counts; the note says so
            n = sum(len(v) for v in samples.values())
            note = f"NVML read failed during the window after {n} sample(s): {self._error}"
        if len(self._marks) == 2:
            (p0, e0), (p1, e1) = self._marks
            kept = {i: [s for s in per if p0 <= s.t_s <= p1] for i, per in samples.items()}
            if all(kept.values()):  # a window shorter than the poll interval keeps all reads
                samples = kept
            if self._util_samples is not None and exc[0] is None:
                try:
                    raw = self._util_samples(e0 - 5.0)
                    in_window = {}
                    for i, per in raw.items():
                        in_window[i], why = samples_in_window(per, e0, e1)
                        note = note or why
                    if not all(in_window.values()):
                        in_window = None
                except Exception as e:  # fall back to the polled reads, saying why
                    note = str(e) if isinstance(e, DeviceMonitorError) else f"NVML utilization samples unavailable: {type(e).__name__}: {e}"
        self.window = GpuWindow(samples, in_window, note, self._gpm, self._gpm_note, self._others, self._others_note)
