"""The heartbeat of a multi-process run (`aiayn_cli/training/heartbeat.py`), on a TCPStore in this process:
a process that stops beating is found lost by process 0, which tells the others; one that finished never is.
Timings are in beats (lost_after / 10), not CPU time; the deadline is only there to end a failing test."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from aiayn_cli.training.heartbeat import EXIT_CODE, Heartbeat, whole_write

LOST_AFTER = 0.5


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))


class Process:
    """One heartbeat with what it reported instead of ending the process."""

    def __init__(self, store, rank: int, world: int):
        self.messages: list[str] = []
        self.codes: list[int] = []
        self.ended = threading.Event()
        client = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=1))
        self.heartbeat = Heartbeat(client, rank, world, LOST_AFTER, self.messages.append, end=self._end)

    def _end(self, code: int) -> None:
        self.codes.append(code)
        self.ended.set()


def _wait(processes, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not all(p.ended.is_set() for p in processes) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_process_that_stops_beating_is_lost_to_all_the_others(store):
    processes = [Process(store, rank, 3) for rank in range(3)]
    for p in processes:
        p.heartbeat.start()
    time.sleep(3 * processes[0].heartbeat.interval)
    processes[2].heartbeat.stop(finished=False)  # as a process that died: no more beats
    _wait(processes[:2])
    for p in processes[:2]:  # process 0 found it; process 1 read it from the store
        assert p.messages == ["process 2 of 3 gave no sign of life for 0.5 s (killed, hung, or its machine is gone)"]
        assert p.codes == [EXIT_CODE]
    assert processes[2].messages == []


def test_a_process_that_finished_is_never_lost(store):
    processes = [Process(store, rank, 2) for rank in range(2)]
    for p in processes:
        p.heartbeat.start()
    processes[1].heartbeat.stop(finished=True)  # its run ended well; process 0 is still at work
    time.sleep(4 * LOST_AFTER)
    assert processes[0].messages == [] and processes[0].codes == []
    processes[0].heartbeat.stop(finished=True)


def test_process_0_lost_is_found_by_the_others(store):
    processes = [Process(store, rank, 2) for rank in range(2)]
    for p in processes:
        p.heartbeat.start()
    processes[0].heartbeat.stop(finished=False)
    _wait(processes[1:])
    assert processes[1].messages[0].startswith("process 0 of 2 gave no sign of life")


def test_the_exit_waits_for_a_checkpoint_being_written(store):
    processes = [Process(store, rank, 2) for rank in range(2)]
    for p in processes:
        p.heartbeat.start()
    with whole_write():  # a checkpoint's files being written while process 1 is lost
        processes[1].heartbeat.stop(finished=False)
        time.sleep(3 * LOST_AFTER)
        assert processes[0].codes == []  # found lost, but waiting for the write
    _wait(processes[:1])
    assert processes[0].codes == [EXIT_CODE]
