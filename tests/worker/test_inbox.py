"""A front's messages read in bulk (service.worker.inbox): whole, in order, as the
connection sent them, whatever the reads cut them into."""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from multiprocessing import Pipe

import numpy as np
import pytest

from service.runtime.decoding import DecodingOptions
from service.worker.inbox import CHUNK, Inbox
from service.worker.messages import Cancel, Job, Submit


def _submit(job_id: int, tokens: int = 20) -> Submit:
    ids = np.arange(tokens, dtype=np.int64)[None]
    job = Job(job_id, {"src_ids": ids, "src_mask": np.ones_like(ids)}, DecodingOptions())
    return Submit("translator/1", job, 1.5)


def _same(a, b) -> bool:
    if isinstance(a, Submit):
        return (
            a.key == b.key
            and a.job.id == b.job.id
            and all(
                np.array_equal(a.job.encoder_inputs[k], b.job.encoder_inputs[k])
                for k in ("src_ids", "src_mask")
            )
        )
    return a == b


def test_messages_sent_back_to_back_are_read_whole_and_in_order_by_one_read():
    front, worker = Pipe()
    inbox = Inbox(worker)
    # small ones (header and pickle in one write), one over 16 KB (written apart), and one
    # larger than a read's chunk
    sent = [_submit(1), Cancel("translator/1", 1), _submit(2, 3000), _submit(3, CHUNK // 4)]
    sending = threading.Thread(target=lambda: [front.send(m) for m in sent])
    sending.start()  # beyond what the socket buffers: sent while read
    got = []
    while len(got) < len(sent):
        got += inbox.read()
    sending.join(10)
    assert len(got) == len(sent) and all(_same(a, b) for a, b in zip(got, sent, strict=True))
    assert inbox.read() == []  # nothing waits
    inbox.close()
    front.send(Cancel("translator/1", 2))  # the link itself stays open
    assert worker.recv() == Cancel("translator/1", 2)


def test_a_message_cut_across_reads_is_given_once_whole():
    front, worker = Pipe()
    inbox = Inbox(worker)
    data = pickle.dumps(_submit(7))
    framed = struct.pack("!i", len(data)) + data
    raw = socket.socket(fileno=front.fileno())
    try:
        for cut in (2, 9, len(framed) - 1):  # within the length, the pickle, its last byte
            raw.sendall(framed[:cut])
            assert inbox.read() == []
            raw.sendall(framed[cut:])
            (message,) = inbox.read()
            assert _same(message, _submit(7))
    finally:
        raw.detach()


def test_the_long_form_of_the_length_is_read():
    """A message over 2 GiB is framed -1, then an 8-byte length: the same rule read."""
    front, worker = Pipe()
    inbox = Inbox(worker)
    data = pickle.dumps(Cancel("m/1", 3))
    raw = socket.socket(fileno=front.fileno())
    try:
        raw.sendall(struct.pack("!i", -1) + struct.pack("!Q", len(data)) + data)
    finally:
        raw.detach()
    assert inbox.read() == [Cancel("m/1", 3)]


def test_a_closed_front_ends_the_reading():
    front, worker = Pipe()
    inbox = Inbox(worker)
    front.send(Cancel("m/1", 1))
    front.close()
    assert inbox.read() == [Cancel("m/1", 1)]
    with pytest.raises(EOFError):
        inbox.read()


def test_a_link_that_is_no_socket_is_read_a_message_at_a_time():
    reader, writer = Pipe(duplex=False)  # the ends of an OS pipe
    inbox = Inbox(reader)
    for job_id in range(3):
        writer.send(Cancel("m/1", job_id))
    assert inbox.read() == [Cancel("m/1", i) for i in range(3)]
