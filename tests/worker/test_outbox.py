"""The worker's outbox: messages leave by a thread of their own, in order, a front whose pipe
is gone is reported back to the loop rather than raised in it, and the thread's time spent
sending is measured for the metrics."""

from __future__ import annotations

import time
from multiprocessing import Pipe

from service.worker.outbox import Outbox


def test_messages_arrive_in_order_and_a_closed_link_is_reported():
    outbox = Outbox()
    (ours, theirs), (gone, other_end) = Pipe(), Pipe()
    other_end.close()
    gone.close()  # sending on it fails
    for i in range(200):
        outbox.put(ours, ("report", i))
    outbox.put(gone, "lost")
    outbox.put(gone, "lost again")  # a broken link is reported once
    outbox.close()
    assert [theirs.recv() for _ in range(200)] == [("report", i) for i in range(200)]
    assert outbox.failed() == [gone] and outbox.failed() == []


def test_a_full_pipe_does_not_block_the_caller():
    outbox = Outbox()
    ours, theirs = Pipe()
    big = b"x" * 1_000_000  # more than a pipe holds: the outbox's send waits for a reader
    for _ in range(3):
        outbox.put(ours, big)  # returns at once
    assert [len(theirs.recv()) for _ in range(3)] == [len(big)] * 3
    outbox.close()


class _SlowLink:
    """A link whose every send takes SEND_SECONDS (a large report being pickled)."""

    def send(self, message) -> None:
        time.sleep(SEND_SECONDS)


SEND_SECONDS = 0.02


def test_the_thread_s_sending_time_is_taken_once():
    outbox = Outbox()
    for _ in range(5):
        outbox.put(_SlowLink(), "report")
    outbox.close()  # sends what is queued first
    seconds = outbox.take_seconds()
    assert 5 * SEND_SECONDS <= seconds < 5 * SEND_SECONDS + 1.0
    assert outbox.take_seconds() == 0.0
