"""Stopping a search cleanly: SIGTERM and SIGHUP handled like Ctrl-C (SIGINT), and which one came; or a
trial's config mistake that every trial would meet."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

from tune_batch.store.records import TrialResult

#: The signal that stopped the current search (None: none did).
received: dict[str, int | None] = {"signal": None}

#: The record of the trial whose config mistake stopped the current search, one every trial would
#: meet (``store.records.config_mistake``); None: none did.
config_fault: dict[str, TrialResult | None] = {"record": None}


def stopping() -> bool:
    """Whether the current search hands out nothing more: a signal came, or a config fault."""
    return received["signal"] is not None or config_fault["record"] is not None


#: What stops a search as Ctrl-C (SIGINT) does: a scheduler's stop (SIGTERM) and the terminal's
#: hang-up (SIGHUP: an ssh connection dropped, a terminal window closed).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _handling(signals: tuple[int, ...], handler: Callable[[int, object], None]) -> Iterator[None]:
    """For the duration, ``handler`` answers ``signals``, in the main thread only (elsewhere
    nothing changes). A signal the parent set to be ignored stays ignored: a search a script
    started with `cmd &` inherits SIGINT ignored, so that a Ctrl-C meant for the script does not
    stop it too; under `nohup`, SIGHUP is ignored so that the search outlives the terminal. The
    previous handlers are put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: h for s in signals if (h := signal.getsignal(s)) is not signal.SIG_IGN}
    for s in before:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


@contextlib.contextmanager
def stops_as_ctrl_c() -> Iterator[None]:
    """For the duration, SIGTERM and SIGHUP stop the process as Ctrl-C does, with KeyboardInterrupt
    (outside a search's ``graceful`` stretch, which handles them itself), and the signal is
    remembered in ``received``. A signal the parent set ignored stays ignored (``nohup`` ignores
    SIGHUP). The previous handlers are put back."""

    def on_stop(signum: int, frame: object) -> None:
        received["signal"] = signum
        # raised here, not as a SIGINT: a process started in the background by a script (`cmd &`)
        # inherits SIGINT ignored, and a SIGINT raised there would be ignored with it
        raise KeyboardInterrupt

    with _handling(STOP_SIGNALS, on_stop):
        yield


def exit_code(signum: int | None) -> int:
    """The command's exit status after a stop by ``signum`` (None: Ctrl-C): 128 + the signal's
    number, as a shell reports a process that the signal ended (130, 143, 129)."""
    return 128 + int(signum or signal.SIGINT)


def said(signum: int | None) -> str:
    """How the stop's message names the signal: nothing for Ctrl-C, else ' (SIGTERM)', ' (SIGHUP)'."""
    return "" if signum in (None, signal.SIGINT) else f" ({signal.Signals(signum).name})"


def _say_stopping(signum: int) -> None:
    """One line on stderr at the first signal: what happens now, and how to stop at once. Written
    with os.write: a handler that prints could land inside the main thread's own print."""
    name, again = ("Ctrl-C", "Ctrl-C again") if signum == signal.SIGINT else (signal.Signals(signum).name,
                                                                              "a second signal")
    if signum == signal.SIGHUP:
        name = "SIGHUP (the terminal is gone)"
    line = (f"\n{name}: no new trial starts; the running ones finish and are recorded, then the results are "
            f"written ({again} stops at once, without them)\n")
    with contextlib.suppress(OSError):
        os.write(2, line.encode())


@contextlib.contextmanager
def graceful() -> Iterator[None]:
    """For the duration, the first SIGINT, SIGTERM or SIGHUP only records itself in ``received`` (the
    caller stops after the running trial, which is recorded); a second one raises
    KeyboardInterrupt at once. A signal that was ignored stays ignored. The previous handlers are
    put back."""

    def on_signal(signum: int, frame: object) -> None:
        if received["signal"] is not None:
            raise KeyboardInterrupt
        received["signal"] = signum
        _say_stopping(signum)

    with _handling((signal.SIGINT, *STOP_SIGNALS), on_signal):
        yield
