"""GPU telemetry from NVML (``nvidia-ml-py``, imported as ``pynvml``): the reader and the sampler;
what a window's samples say is ``gpu_window``.

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
from typing import Any

from tune_batch.errors import DeviceMonitorError
from tune_batch.measure.gpu_window import GpuSample, GpuWindow, others_of, samples_in_window


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

        return [(pynvml.NVML_GPM_METRIC_SM_UTIL, "sm_active"),
                (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, "tensor_active")]
    except (ImportError, AttributeError):
        return []


_GPM_METRICS = _gpm_metric_ids()


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
            self._others = None
            self._others_note = str(e) if isinstance(e, DeviceMonitorError) else f"NVML process list unavailable: {e}"
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
                self._gpm_note = (str(e) if isinstance(e, DeviceMonitorError)
                                  else f"GPM read failed: {type(e).__name__}: {e}")

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
                    note = (str(e) if isinstance(e, DeviceMonitorError)
                            else f"NVML utilization samples unavailable: {type(e).__name__}: {e}")
        self.window = GpuWindow(samples, in_window, note, self._gpm, self._gpm_note, self._others, self._others_note)
