"""SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption notice) during `aiayn train`: the first asks the
loop to finish its step and save a checkpoint; a second ends the process at once."""

from __future__ import annotations

import contextlib
import os
import signal
import threading


class StopSignals:
    """While active (in the main thread), SIGINT and SIGTERM set `received` instead of killing the
    process; a second one kills it at once with the signal's default action."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, step=lambda: 0, on_abort=lambda: None):
        self.received: int | None = None
        self.previous: dict = {}
        self.step = step  # the step being computed, for the message
        self.on_abort = on_abort  # before the second signal ends the process: remove what is half-written

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame) -> None:
        name = signal.Signals(number).name
        if self.received is not None:
            os.write(2, f"\n{name} again: stopping now, without a checkpoint\n".encode())
            with contextlib.suppress(Exception):
                self.on_abort()
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        self.received = number
        message = f"{name}: finishing step {self.step()}, then saving a checkpoint ({name} again stops at once)"
        os.write(2, f"\n{message}\n".encode())


__all__ = ["StopSignals"]
