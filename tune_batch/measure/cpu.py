"""CPU measurements: busy share of the cores a trial may use, and sampled resident memory."""

from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
from dataclasses import dataclass

import psutil

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size in bytes (read from /proc when there is one)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return int(psutil.Process().memory_info().rss)


def _cpu_seconds(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # a child that ended between the listing and the read
            continue
    return total


#: The process ids of a worker group's other ranks on this node (set in each rank's process):
#: their CPU time is the trial's own, not another tenant's
PEERS_ENV = "TUNE_BATCH_GROUP_PEER_PIDS"


def peer_processes() -> list[psutil.Process]:
    """The processes ``PEERS_ENV`` names that are alive (none outside a worker group)."""
    out = []
    for pid in filter(None, os.environ.get(PEERS_ENV, "").split(",")):
        try:
            out.append(psutil.Process(int(pid)))
        except (ValueError, psutil.Error):
            continue
    return out


#: A window is disturbed when other processes used more than this share of the machine's CPU
#: time during it, or the hypervisor took more than STEAL_LIMIT of it (a trial uses every core of
#: its node by default, so others' work takes time from it directly).
OTHERS_LIMIT = 0.15
STEAL_LIMIT = 0.05
_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def machine_cpu_s() -> tuple[float, float, float] | None:
    """(busy, steal, total) CPU seconds of the whole machine since boot, from /proc/stat; None
    where there is no /proc."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    busy = user + nice + system + irq + softirq
    return busy * _TICK_S, steal * _TICK_S, (busy + idle + iowait + steal) * _TICK_S


@dataclass(frozen=True)
class CpuWindow:
    wall_s: float
    cpu_s: float
    threads: int
    machine_busy_s: float | None = None  # every process's CPU time over the window (None: not read)
    machine_steal_s: float | None = None
    machine_total_s: float | None = None
    peers_cpu_s: float = 0.0  # the CPU time of the worker group's other ranks on this node (PEERS_ENV)

    @property
    def others_cpu_frac(self) -> float | None:
        """Other processes' CPU time over the window (not this trial's: this process, its children,
        its worker group's other ranks), as a share of the machine's."""
        if self.machine_busy_s is None or not self.machine_total_s:
            return None
        return max(0.0, self.machine_busy_s - self.cpu_s - self.peers_cpu_s) / self.machine_total_s

    @property
    def steal_frac(self) -> float | None:
        if self.machine_steal_s is None or not self.machine_total_s:
            return None
        return self.machine_steal_s / self.machine_total_s

    @property
    def disturbed(self) -> bool:
        return (self.others_cpu_frac or 0.0) > OTHERS_LIMIT or (self.steal_frac or 0.0) > STEAL_LIMIT

    @property
    def util(self) -> float:
        """CPU time / (wall time x threads), clipped to [0, 1]; see ``util_raw``."""
        return min(1.0, max(0.0, self.util_raw))

    @property
    def util_raw(self) -> float:
        return self.cpu_s / (self.wall_s * self.threads) if self.wall_s > 0 and self.threads > 0 else 0.0


class CpuUtilWindow:
    """CPU time of this process and its children (DataLoader workers) over a window."""

    def __init__(self, threads: int) -> None:
        self._proc = psutil.Process()
        self._peers = peer_processes()
        self._threads = threads
        self._t0 = self._c0 = self._p0 = 0.0
        self._m0: tuple[float, float, float] | None = None

    def _peers_cpu_s(self) -> float:
        total = 0.0
        for p in self._peers:
            try:
                total += _cpu_seconds(p)
            except psutil.Error:  # a rank that ended (its group is failing: the window does not count)
                continue
        return total

    def start(self) -> None:
        self._m0 = machine_cpu_s()
        self._p0 = self._peers_cpu_s()
        self._c0 = _cpu_seconds(self._proc)
        self._t0 = time.perf_counter()

    def stop(self) -> CpuWindow:
        wall = time.perf_counter() - self._t0
        cpu = _cpu_seconds(self._proc) - self._c0
        peers = self._peers_cpu_s() - self._p0
        m1 = machine_cpu_s()
        if self._m0 is None or m1 is None:
            return CpuWindow(wall_s=wall, cpu_s=cpu, threads=self._threads)
        busy, steal, total = (b - a for a, b in zip(self._m0, m1))
        return CpuWindow(wall, cpu, self._threads, busy, steal, total, max(0.0, peers))


def _read_hwm_bytes() -> int | None:
    """The kernel's resident-memory high-water mark (VmHWM) of this process, or None."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc), so RSS starts from what is really in use;
    without it a second trial in the same process reuses the first one's pages unseen."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _read_hwm_bytes() is not None
    except OSError:
        return False


class PeakRss:
    """Peak resident memory of this process above a baseline, for the CPU device.

    On Linux it reads the kernel's high-water mark (reset at ``__enter__``), which sees every
    peak however short and costs nothing between reads; elsewhere a thread samples RSS every
    ``interval_s``. ``poll()`` (called once per training step) updates the peak and sets
    ``exceeded`` when the peak above the baseline passes ``cap_bytes``.
    """

    def __init__(self, cap_bytes: int | None = None, interval_s: float = 0.005) -> None:
        self.cap_bytes = cap_bytes
        self.interval_s = interval_s
        self.baseline_bytes = 0
        self.peak_rss_bytes = 0
        self.method = ""
        self.exceeded = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def peak_bytes(self) -> int:
        """Largest RSS seen above the baseline, in bytes."""
        self.poll()
        return max(0, self.peak_rss_bytes - self.baseline_bytes)

    def _see(self, rss: int) -> None:
        if rss > self.peak_rss_bytes:
            self.peak_rss_bytes = rss
            if self.cap_bytes is not None and rss - self.baseline_bytes > self.cap_bytes:
                self.exceeded.set()

    def poll(self) -> None:
        if self.method == "hwm":
            hwm = _read_hwm_bytes()
            if hwm is not None:
                self._see(hwm)
        elif self.method == "sampled":
            self._see(rss_bytes())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._see(rss_bytes())

    def __enter__(self) -> PeakRss:
        trim_heap()
        self.baseline_bytes = self.peak_rss_bytes = rss_bytes()
        if _reset_hwm():
            self.method = "hwm"
        else:
            self.method = "sampled"
            self._thread = threading.Thread(target=self._run, name="tune_batch-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self.poll()
