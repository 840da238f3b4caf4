"""Host memory a batch's rows are kept in and moved within, reused from rebuild to rebuild.

Fresh memory costs its page faults on first touch: on the virtual machine of the benchmarks,
gathering a 4.8 MB tensor into a new array took 22 to 31 ms where the same copy into memory
already touched takes 0.13 (docs/benchmarks.md, "Host rows kept in place"). So every tensor
of a host batch lives in one of two flat buffers of its own: a rebuild writes it into the
other one, and rows that join extend it in place while its buffer has room. Once a batch has
grown to its size, neither faults a page in again. The buffers outlive the batch's rows (an
emptied batch keeps them for the next): they hold at most what the largest batch held, a
quarter more, twice, until the worker has been idle a while (`Scheduler.rest`: the store
then starts anew). Letting a buffer go as soon as a rebuild fills less of it was measured
slower: every drain and refill faulted the memory in again.
"""

from __future__ import annotations

import numpy as np

SPARE = 4  # a rebuild's buffer holds a 1/SPARE more rows than it writes (at least MIN_SPARE)
MIN_SPARE = 8


def spare(rows: int) -> int:
    """Rows a buffer made for `rows` rows holds beyond them."""
    return max(MIN_SPARE, rows // SPARE)


class Arenas:
    """Two flat buffers per key, and which of them each key's tensor is now in (a view)."""

    def __init__(self):
        self.buffers: dict[object, list[np.ndarray]] = {}  # by key: two flat byte buffers
        self.homes: dict[object, tuple[int, np.ndarray]] = {}  # by key: (buffer, view) last

    def fresh(self, key, shape: tuple[int, ...], dtype, old=None) -> np.ndarray:
        """A C-contiguous array of `shape` in the buffer of `key` that `old` (the tensor it
        is written from) does not lie in; the buffer is made anew, with spare rows, where it
        is too small. What it holds is whatever the buffer held (every value finite: it
        only ever held this key's tensors, or zeros)."""
        dtype = np.dtype(dtype)
        pair = self.buffers.setdefault(key, [_EMPTY, _EMPTY])
        index = 0
        if old is not None:
            home = self.homes.get(key)
            if home is not None and home[1] is old:
                index = 1 - home[0]
            elif np.may_share_memory(pair[0], old):
                index = 1
        row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        if pair[index].nbytes < shape[0] * row:
            pair[index] = np.zeros((shape[0] + spare(shape[0])) * row, dtype=np.uint8)
        return self._home(key, index, shape, dtype)

    def room(self, key, tensor: np.ndarray, rows: int) -> bool:
        """Whether `tensor` is `key`'s array here, with room for `rows` rows."""
        home = self.homes.get(key)
        if home is None or home[1] is not tensor:
            return False
        row = int(np.prod(tensor.shape[1:], dtype=np.int64)) * tensor.itemsize
        return rows * row <= self.buffers[key][home[0]].nbytes

    def extend(self, key, tensor: np.ndarray, rows: int) -> np.ndarray:
        """`tensor` (with `room` for `rows`) as `rows` rows: its own rows where they are,
        the new ones after them holding whatever the buffer held."""
        index = self.homes[key][0]
        return self._home(key, index, (rows, *tensor.shape[1:]), tensor.dtype)

    def _home(self, key, index: int, shape, dtype: np.dtype) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        view = self.buffers[key][index][:size].view(dtype).reshape(shape)
        self.homes[key] = (index, view)
        return view


_EMPTY = np.zeros(0, dtype=np.uint8)
