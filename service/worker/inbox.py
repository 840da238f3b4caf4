"""A front's messages to a worker, read in bulk.

A front's link is a `multiprocessing.connection.Connection` over a socket. Its `recv` reads
one message with two reads (the length, then the pickle), and the worker's loop then asked
`poll(0)` whether another one waits: three system calls a message, in the worker's loop,
where a busy GPU worker reads a few messages every step (under a sandbox such as gVisor a
system call costs tens of microseconds). `Inbox.read` takes everything the socket holds in
one non-blocking read (`MSG_DONTWAIT`, so the socket stays blocking for the outbox thread
that writes to it) and splits it by the connection's own framing: a 4-byte big-endian
signed length, or -1 and an 8-byte length for a message over 2 GiB, then the pickle. What
is left of a message not yet whole stays for the next read.

A link that is not a socket (no `MSG_DONTWAIT`) is read message by message, as before.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct

CHUNK = 1 << 16  # bytes a read asks for; a read that fills it is followed by another
_LENGTH, _LONG_LENGTH = struct.Struct("!i"), struct.Struct("!Q")


def one_by_one(link) -> list:
    """The messages waiting on `link` read by the connection itself, one by one: its `recv`
    (at least one waits), then `poll(0)` for the next."""
    messages = [link.recv()]
    while link.poll(0):
        messages.append(link.recv())
    return messages


class Inbox:
    def __init__(self, link):
        """`link`: a Connection; read here only, once its handshake is done."""
        self.link = link
        self._buffer = bytearray()
        self._socket = None
        descriptor = os.dup(link.fileno())  # a socket of its own over it: closed apart
        try:
            self._socket = socket.socket(fileno=descriptor)
        except OSError:  # not a socket (a pipe's end): read a message at a time
            os.close(descriptor)
        else:  # blocking, as the connection's writes need (the flag is the descriptor's)
            self._socket.setblocking(True)

    def read(self) -> list:
        """Every whole message waiting (none where a message is not yet whole); EOFError
        once the other end closed, OSError where the link broke."""
        if self._socket is None:
            return one_by_one(self.link)
        while True:
            try:
                data = self._socket.recv(CHUNK, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                raise EOFError("the front closed its link")
            self._buffer += data
            if len(data) < CHUNK:
                break
        return self._split()

    def _split(self) -> list:
        buffer, start, messages = self._buffer, 0, []
        with memoryview(buffer) as view:
            while len(buffer) - start >= _LENGTH.size:
                (size,) = _LENGTH.unpack_from(buffer, start)
                header = _LENGTH.size
                if size == -1:
                    if len(buffer) - start < header + _LONG_LENGTH.size:
                        break
                    (size,) = _LONG_LENGTH.unpack_from(buffer, start + header)
                    header += _LONG_LENGTH.size
                end = start + header + size
                if end > len(buffer):
                    break
                with view[start + header : end] as part:
                    messages.append(pickle.loads(part))
                start = end
        del buffer[:start]
        return messages

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
