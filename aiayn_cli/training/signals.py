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
    process; a second one kills it at once with the signal's default action.

    The loop reads `received` only through `poll`, which also says at which step a signal coming after
    it will stop the run: the message names that step, whatever line the signal interrupts."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stops_at: int = 0, on_abort=lambda: None, kept=lambda: ""):
        self.received: int | None = None
        self.previous: dict = {}
        self.stops_at = stops_at  # the step a signal coming now saves and stops at, for the message
        self.on_abort = on_abort  # before the second signal ends the process: remove what is half-written
        self.kept = kept  # then: what is left to resume from, for the message

    def poll(self, then_stops_at: int) -> bool:
        """Whether a signal has come; one coming after this call stops the run at step `then_stops_at`.
        One statement without calls: CPython runs a signal's handler before or after it, never inside."""
        received, self.stops_at = self.received, then_stops_at
        return received is not None

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
        message = f"{name}: finishing step {self.stops_at}, then saving a checkpoint ({name} again stops at once)"
        os.write(2, f"\n{message}\n".encode())


__all__ = ["StopSignals"]
