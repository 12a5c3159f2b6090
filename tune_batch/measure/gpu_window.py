"""A timed window's GPU samples and what they say (utilization, energy, power, memory, other
processes), kept apart from NVML itself (``nvml`` reads them): plain frozen records and pure
functions, so recorded samples can be replayed without a GPU."""

from __future__ import annotations

from dataclasses import dataclass


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


def others_of(seen: dict[int, int], me: int) -> tuple[dict[int, int], str | None]:
    """The entries of ``seen`` (pid -> GPU memory) other than this process ``me``; where ``me`` is
    absent (another pid namespace), all but the one using the least memory, with a note."""
    if me in seen or not seen:
        return {p: m for p, m in seen.items() if p != me}, None
    mine = min(seen, key=lambda p: seen[p])
    return ({p: m for p, m in seen.items() if p != mine},
            "NVML's process ids are not this process's (a container): counted all compute processes but one")


def samples_in_window(samples: list[tuple[float, float]], start_s: float,
                      end_s: float) -> tuple[list[float], str | None]:
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
