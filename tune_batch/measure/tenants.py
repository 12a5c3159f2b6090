"""Other tenants of a GPU: the memory other processes hold on it when a trial starts (NVML), so
that what a trial may use is the device's memory less theirs."""

from __future__ import annotations

from tune_batch.errors import DeviceMonitorError


def others_bytes(torch_index: int) -> tuple[int | None, str | None]:
    """(bytes that other compute processes hold on the GPU now, a note); (None, why) where NVML
    cannot tell. A process whose memory the driver does not report counts 0 (the note says so)."""
    try:
        from tune_batch.measure.nvml import NvmlReader

        found, note = NvmlReader([torch_index]).processes()
    except DeviceMonitorError as e:
        return None, f"other processes' memory not read: {e}"
    return sum(found.values()), note


def usable_bytes(total: int, cap: int | None, others: int | None) -> int:
    """The memory a trial may use on a device of ``total`` bytes: the cap (when given) and the
    device less what other processes hold, whichever is smaller."""
    usable = total - (others or 0)
    return max(0, min(usable, cap) if cap is not None else usable)
