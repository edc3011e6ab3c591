"""Lost processes: when one process of a multi-process run dies or hangs, the others stop within
`lost_process_after` seconds (plus one beat), with one line saying so, leaving no checkpoint
half-written; the same command, run again on every machine, resumes from the last checkpoint.

gloo's collectives fail at once where a peer's connection closes (a process killed on a CPU run:
`train()` turns that error into the same line). NCCL's do not always: processes on one node talk
through shared memory or NVLink, a machine that vanishes closes no socket, and a hung process keeps
its connections open. The others then wait in the collective until its timeout (torch's default:
10 minutes for NCCL, 30 for gloo), and `accelerate launch` on another machine never hears of it.

So every process beats: a thread adds 1 to its own counter in the run's rendezvous store (the
TCPStore at MASTER_ADDR:MASTER_PORT that `accelerate launch` and torchrun start on the first
machine) every `lost_after / 10` seconds. Process 0 reads every counter; the others read process
0's counter and the store's `lost` key, which process 0 sets when it finds a counter stopped. A
counter that has not moved for `lost_after` seconds, or a store that has not answered for that
long, is a lost process: this one writes one line, waits for a checkpoint being written to be whole
(`whole_write`), runs `on_lost` (the main process removes what it had begun) and ends with exit
code 1 -- from the thread, since the main thread may be stuck in a collective that never returns.
A process that finished its run marks its counter so, and is never taken for lost.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta

EXIT_CODE = 1
_FINISHED = 1 << 40  # added to a counter when its process is done: never lost after that
_WRITING = threading.RLock()


@contextmanager
def whole_write():
    """A block of file writes that a lost-process exit waits for (a checkpoint's files)."""
    with _WRITING:
        yield


class Heartbeat:
    """The beating thread of one process (see the module's docstring)."""

    def __init__(
        self,
        store,
        rank: int,
        world: int,
        lost_after: float,
        on_lost: Callable[[str], None],
        end: Callable[[int], None] = os._exit,
    ):
        self.store, self.rank, self.world, self.lost_after = store, rank, world, lost_after
        self.on_lost, self.end = on_lost, end  # end(EXIT_CODE): how this process ends (os._exit)
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restarted group counts anew
        self.prefix = f"aiayn/heartbeat/{restart}"
        self.interval = max(min(lost_after / 10, 3.0), 0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aiayn-heartbeat", daemon=True)

    @classmethod
    def from_environment(cls, lost_after: float, on_lost: Callable[[str], None]) -> Heartbeat | None:
        """A heartbeat on the store of this `torch.distributed` run of 2+ processes; None where there
        is none (one process, or no MASTER_ADDR / MASTER_PORT rendezvous)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not host or not port:
            return None
        store = dist.TCPStore(
            host, int(port), is_master=False, timeout=timedelta(seconds=lost_after), wait_for_workers=False
        )
        return cls(store, dist.get_rank(), dist.get_world_size(), lost_after, on_lost)

    def key(self, rank: int) -> str:
        return f"{self.prefix}/{rank}"

    def start(self) -> Heartbeat:
        self.store.add(self.key(self.rank), 1)
        self._thread.start()
        return self

    def stop(self, finished: bool) -> None:
        """Stop beating; `finished`: the run ended well here (never lost, whatever happens next).
        Without it, the others take this process for lost after `lost_after` seconds, as they should
        where it ends on an error of its own."""
        self._stop.set()
        self._thread.join()
        if finished:
            try:
                self.store.add(self.key(self.rank), _FINISHED)
            except Exception:  # the store is gone: the run is over anyway
                pass

    def _run(self) -> None:
        watched = range(self.world) if self.rank == 0 else [0]
        seen = {rank: (-1, time.monotonic()) for rank in watched if rank != self.rank}  # count, when it moved
        answered = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            try:
                self.store.add(self.key(self.rank), 1)
                counts = {rank: self.store.add(self.key(rank), 0) for rank in seen}
                lost_key = f"{self.prefix}/lost"
                lost = self.store.get(lost_key).decode() if self.store.check([lost_key]) else ""
                answered = now
            except Exception as err:  # a store that does not answer (its machine gone, or ending)
                if now - answered >= self.lost_after:
                    return self._lost(f"the run's rendezvous store stopped answering ({type(err).__name__})")
                continue
            if lost:
                return self._lost(lost)
            for rank, count in counts.items():
                if count >= _FINISHED:
                    continue
                if count != seen[rank][0]:
                    seen[rank] = (count, now)
                elif now - seen[rank][1] >= self.lost_after:
                    message = (
                        f"process {rank} of {self.world} gave no sign of life for {self.lost_after:g} s "
                        "(killed, hung, or its machine is gone)"
                    )
                    if self.rank == 0:
                        try:
                            self.store.set(f"{self.prefix}/lost", message)
                        except Exception:
                            pass
                    return self._lost(message)

    def _lost(self, message: str) -> None:
        """Wait for a checkpoint being written (a minute at most), clean up, say why, end the process."""
        if self._stop.is_set():  # stopped meanwhile: the run is over here
            return
        held = _WRITING.acquire(timeout=60)  # held to the end: no write starts after this
        try:
            self.on_lost(message)
        finally:
            sys.stderr.flush()
            if self.rank == 0:  # the others read the `lost` key before the store may go with this process
                time.sleep(2 * self.interval)
            self.end(EXIT_CODE)
            if held:  # `end` returned (a test's): let writes go on
                _WRITING.release()


__all__ = ["EXIT_CODE", "Heartbeat", "whole_write"]
