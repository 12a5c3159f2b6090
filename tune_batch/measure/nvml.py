"""GPU telemetry from NVML (``nvidia-ml-py``, imported as ``pynvml``).

A background thread samples utilization.gpu, memory used and power of exactly the trial's
GPUs at ``interval_s`` (default 20 Hz). NVML errors become DeviceMonitorError with the cause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tune_batch.errors import DeviceMonitorError


@dataclass(frozen=True)
class GpuSample:
    t_s: float
    util_frac: float
    mem_used_bytes: int
    power_w: float | None
    energy_mj: float | None = None  # the GPU's total-energy counter (millijoules), where it has one


@dataclass(frozen=True)
class GpuWindow:
    """Samples of one window, per GPU. ``device_util`` is the mean over GPUs and samples."""

    samples: dict[int, list[GpuSample]]

    @property
    def device_util(self) -> float | None:
        vals = [s.util_frac for per in self.samples.values() for s in per]
        return sum(vals) / len(vals) if vals else None

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
    def n_samples(self) -> int:
        return sum(len(v) for v in self.samples.values())


def _nvml_reader(torch_indices: list[int]) -> Callable[[], dict[int, GpuSample]]:
    """A function reading one sample of each of the trial's GPUs, matched to NVML by UUID so
    that CUDA_VISIBLE_DEVICES (and Ray's assignment) is respected."""
    try:
        import pynvml
    except ImportError as e:
        raise DeviceMonitorError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from e
    import torch

    try:
        pynvml.nvmlInit()
        handles = {}
        for i in torch_indices:
            uuid = str(torch.cuda.get_device_properties(i).uuid)
            uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            handles[i] = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except pynvml.NVMLError as e:
        raise DeviceMonitorError(f"NVML could not open the trial's GPUs {torch_indices}: {e}") from e

    def read() -> dict[int, GpuSample]:
        out = {}
        now = time.perf_counter()
        try:
            for i, h in handles.items():
                util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
                mem = pynvml.nvmlDeviceGetMemoryInfo(h).used
                try:
                    power: float | None = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
                except pynvml.NVMLError:
                    power = None
                try:
                    energy: float | None = float(pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
                except pynvml.NVMLError:
                    energy = None
                out[i] = GpuSample(now, util, int(mem), power, energy)
        except pynvml.NVMLError as e:
            raise DeviceMonitorError(f"NVML read failed: {e}") from e
        return out

    return read


class GpuSampler:
    """Samples in a thread between ``__enter__`` and ``__exit__``; ``window`` holds the result.

    ``reader`` can be given to replay recorded samples (tests without a GPU).
    """

    def __init__(self, torch_indices: list[int], interval_s: float = 0.05,
                 reader: Callable[[], dict[int, GpuSample]] | None = None) -> None:
        self._read = reader or _nvml_reader(torch_indices)
        self.interval_s = interval_s
        self._samples: dict[int, list[GpuSample]] = {i: [] for i in torch_indices}
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tune_batch-nvml", daemon=True)
        self.window: GpuWindow | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for i, s in self._read().items():
                    self._samples.setdefault(i, []).append(s)
            except BaseException as e:  # keep it for the caller's thread
                self._error = e
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise DeviceMonitorError(f"GPU sampling failed: {self._error}") from self._error
        self.window = GpuWindow(self._samples)
