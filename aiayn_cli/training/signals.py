"""SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption notice) during `aiayn train`: the first asks the
loop to finish its step and save a checkpoint; a second ends the process at once, whatever it was doing:
the checkpoint being written (a `.tmp` folder until it is complete) is removed, the complete ones are
kept, and the one line it prints names the newest of them, which the same command resumes from."""

from __future__ import annotations

import contextlib
import os
import signal
import threading


class StopSignals:
    """While active (in the main thread), SIGINT and SIGTERM set `received` instead of killing the
    process; a second one kills it at once with the signal's default action."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, step=lambda: 0, on_abort=lambda: None, kept=lambda: ""):
        self.received: int | None = None
        self.previous: dict = {}
        self.step = step  # the step being computed, for the message
        self.on_abort = on_abort  # before the second signal ends the process: remove what is half-written
        self.kept = kept  # then: what is left to resume from, for the message

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
            kept = ""
            with contextlib.suppress(Exception):
                self.on_abort()
                kept = self.kept()
            os.write(2, f"\n{name} again: stopping now{'; ' + kept if kept else ''}\n".encode())
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        self.received = number
        message = f"{name}: finishing step {self.step()}, then saving a checkpoint ({name} again stops at once)"
        os.write(2, f"\n{message}\n".encode())


__all__ = ["StopSignals"]
