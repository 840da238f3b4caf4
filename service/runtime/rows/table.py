"""The bookkeeping every way of holding rows shares: which slot each row is in, and each
slot's masks, length and input, as host arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.runtime.batching import concat_padded
from service.runtime.tensors import Tensors

MIN_TRIM = 8  # padding columns worth dropping (and at least 1/8 of the length)
IDLE_STEPS = 16  # steps a dead slot may wait for a joining request before a rebuild
# the input of a slot that holds none (no row yet, or its row gone when the rows moved): a
# row repeated into it has its memory copied (`SlotTable.copy`), whatever the slot held
NO_INPUT = -1


@dataclass
class NewRows:
    """Rows joining a batch: their memory and initial state (the engine's tensors), and on
    the host their memory mask (rows, S) and the batch-wide input each decodes (rows,)."""

    memory: Tensors
    memory_mask: np.ndarray
    state: Tensors
    inputs: np.ndarray

    def __len__(self) -> int:
        return len(self.inputs)


def trim(mask: np.ndarray, leading: bool) -> int:
    """Columns of `mask` (rows, L) that no row uses: leading ones, or trailing ones."""
    used = np.flatnonzero(mask.any(axis=0))
    if leading:
        return int(used[0]) if len(used) else mask.shape[1]
    return mask.shape[1] - (int(used[-1]) + 1 if len(used) else 0)


def row_extents(mask: np.ndarray) -> np.ndarray:
    """(rows, L) -> (rows,) int64: each row's columns up to the last it uses."""
    used = mask != 0
    return np.where(used.any(axis=1), mask.shape[1] - np.argmax(used[:, ::-1], axis=1), 0)


def extent(mask: np.ndarray) -> int:
    """Columns of `mask` (rows, L) up to the last any row uses."""
    return mask.shape[1] - trim(mask, leading=False)


class SlotTable:
    """Rows live in slots; a dead slot (its row left) is still computed, its output ignored.

    `alive` gives the slot of each row in row order; `identity` says row i is in slot i and
    no slot is dead (a step then needs no index at all)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.memory_mask = np.zeros((0, 0), dtype=np.int64)  # (slots, S)
        self.extents = np.zeros(0, dtype=np.int64)  # (slots,) memory positions each uses
        self.self_mask = np.zeros((0, 0), dtype=np.int64)  # (slots, P)
        self.lengths = np.zeros(0, dtype=np.int64)  # (slots,) tokens fed
        self.inputs = np.zeros(0, dtype=np.int64)  # (slots,) the input a slot decodes
        self.idle = np.zeros(0, dtype=np.int64)  # (slots,) steps a slot has been dead
        self.alive = np.zeros(0, dtype=np.int64)  # (rows,) the slot of each row
        self.identity = True
        self.left = False  # rows left since the last look for padding columns

    @property
    def rows(self) -> int:
        return len(self.alive)

    @property
    def slots(self) -> int:
        return len(self.lengths)

    @property
    def cache_length(self) -> int:
        return self.self_mask.shape[1]

    @property
    def memory_length(self) -> int:
        return self.memory_mask.shape[1]

    def dead(self) -> np.ndarray:
        """(slots,) bool: the slots no row is in."""
        dead = np.ones(self.slots, dtype=bool)
        dead[self.alive] = False
        return dead

    def free(self) -> np.ndarray:
        return np.flatnonzero(self.dead())

    def set_alive(self, alive: np.ndarray) -> None:
        """The slots of the rows, in row order (fewer than before: rows left)."""
        self.left |= len(alive) < self.rows
        self.alive = alive
        self.identity = self.slots == self.rows and np.array_equal(alive, np.arange(self.slots))

    def rows_left(self) -> bool:
        """Whether rows left since the last look (padding columns may have appeared); the
        look clears it."""
        left, self.left = self.left, False
        return left

    def stepped(self, new: int) -> None:
        """Every slot fed `new` more tokens."""
        self.lengths = self.lengths + new

    def extend_self_mask(self, new: int) -> None:
        """Every slot's self mask `new` columns longer: the step's new positions, all real."""
        ones = np.ones((self.slots, new), dtype=np.int64)
        self.self_mask = np.concatenate([self.self_mask, ones], 1)

    def adopt(self, new: NewRows) -> None:
        """An empty table takes `new`'s rows, row i in slot i."""
        rows = len(new)
        self.memory_mask = new.memory_mask
        self.extents = row_extents(new.memory_mask)
        self.self_mask = np.zeros((rows, 0), dtype=np.int64)
        self.lengths = np.zeros(rows, dtype=np.int64)
        self.inputs, self.idle = new.inputs, np.zeros(rows, dtype=np.int64)
        self.alive, self.identity = np.arange(rows), True

    def grow(self, extra: int) -> None:
        """`extra` dead slots after the last, for rows that join in place (each attends to
        its first memory position until one does)."""
        mask = np.zeros((extra, self.memory_length), dtype=np.int64)
        mask[:, :1] = 1
        self.memory_mask = np.concatenate([self.memory_mask, mask])
        self.extents = np.concatenate([self.extents, np.ones(extra, np.int64)])
        padding = np.zeros((extra, self.cache_length), dtype=np.int64)
        self.self_mask = np.concatenate([self.self_mask, padding])
        zeros = np.zeros(extra, dtype=np.int64)
        self.lengths = np.concatenate([self.lengths, zeros])
        self.inputs = np.concatenate([self.inputs, np.full(extra, NO_INPUT, dtype=np.int64)])
        self.idle = np.concatenate([self.idle, zeros])
        self.identity = False

    def write(self, slots: np.ndarray, new: NewRows) -> None:
        """`new`'s rows take dead slots `slots` (after the rows there are)."""
        used = extent(new.memory_mask)
        self.memory_mask[slots] = 0
        self.memory_mask[slots, :used] = new.memory_mask[:, :used]
        self.extents[slots] = row_extents(new.memory_mask)
        self.self_mask[slots] = 0
        self.lengths[slots], self.inputs[slots], self.idle[slots] = 0, new.inputs, 0
        self.set_alive(np.concatenate([self.alive, slots]))

    def copy(self, origins: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Slots `origins` copied to slots `targets` (disjoint) -> (len,) bool, where the
        input differs (there the memory moves too; beams of one input share theirs)."""
        other = self.inputs[origins] != self.inputs[targets]
        if other.any():
            self.memory_mask[targets[other]] = self.memory_mask[origins[other]]
            self.extents[targets[other]] = self.extents[origins[other]]
        self.self_mask[targets] = self.self_mask[origins]
        self.lengths[targets] = self.lengths[origins]
        self.inputs[targets] = self.inputs[origins]
        self.idle[targets] = 0
        return other

    def rehouse(
        self, live: np.ndarray, places: np.ndarray, slots: int, memory: int, keep_slots: bool
    ) -> None:
        """The rows of slots `live` into slots `places` of `slots` slots whose memory masks
        hold `memory` columns (each row's cut or padded to it; a free slot attends to its
        first position). `keep_slots`: every row keeps its slot (`places` is `live`) and
        all but the memory masks stays; else the lengths and inputs move with the rows, no
        slot is idle, and the self mask has no columns (a cache written in place is masked
        by position). Either way a slot without a row holds NO_INPUT from now on: the memory
        of the live rows alone moved."""
        mask = np.zeros((slots, memory), dtype=np.int64)
        mask[:, 0] = 1
        extents = np.ones(slots, dtype=np.int64)
        kept = min(memory, self.memory_length)
        mask[places] = 0
        mask[places, :kept] = self.memory_mask[live, :kept]
        extents[places] = np.minimum(self.extents[live], kept)
        self.memory_mask, self.extents = mask, extents
        inputs = np.full(slots, NO_INPUT, np.int64)
        inputs[places] = self.inputs[live]
        self.inputs = inputs
        if keep_slots:
            return
        lengths = np.zeros(slots, np.int64)
        lengths[places] = self.lengths[live]
        self.lengths = lengths
        self.self_mask = np.zeros((slots, 0), dtype=np.int64)
        self.idle = np.zeros(slots, dtype=np.int64)
        self.alive, self.left = places, False
        self.identity = len(places) == slots

    def compact(self, lead: int, memory: int, new: NewRows | None = None) -> None:
        """The live rows into slots 0.. in row order, the self mask's first `lead` columns
        and the memory mask's columns from `memory` on dropped; `new`'s rows after them."""
        live = self.alive
        self.self_mask = np.ascontiguousarray(self.self_mask[live, lead:])
        self.memory_mask = np.ascontiguousarray(self.memory_mask[live, :memory])
        self.extents = np.minimum(self.extents[live], memory)
        self.lengths, self.inputs = self.lengths[live], self.inputs[live]
        if new is not None:
            self.memory_mask = concat_padded([self.memory_mask, new.memory_mask])
            self.extents = np.concatenate([self.extents, row_extents(new.memory_mask)])
            padding = np.zeros((len(new), self.cache_length), dtype=np.int64)
            self.self_mask = np.concatenate([self.self_mask, padding])
            self.lengths = np.concatenate([self.lengths, np.zeros(len(new), np.int64)])
            self.inputs = np.concatenate([self.inputs, new.inputs])
        self.idle = np.zeros(self.slots, dtype=np.int64)
        self.alive, self.identity, self.left = np.arange(self.slots), True, False

    def padding(self) -> tuple[int, int]:
        """(leading self-mask columns, trailing memory-mask columns) no live row uses."""
        live = self.alive
        used = int(self.extents[live].max(initial=0))
        return trim(self.self_mask[live], leading=True), self.memory_length - used

    def used_memory(self) -> int:
        """Memory positions the live rows use."""
        return int(self.extents[self.alive].max(initial=0))

    def worth_compacting(self, growing: bool) -> bool:
        """Dead slots too many or idle too long, or padding columns piled up as rows left (a
        table without a growing state drops leading self-mask columns at once: no state to
        cut)."""
        dead = self.slots - self.rows
        if dead and (3 * dead > self.slots or self.idle.max() >= IDLE_STEPS):
            return True
        if not self.rows_left():  # padding columns appear only when rows leave
            return False
        lead, padding = self.padding()
        if lead >= max(MIN_TRIM, self.cache_length // 8):
            if growing:
                return True
            self.self_mask = np.ascontiguousarray(self.self_mask[:, lead:])
        return padding >= max(MIN_TRIM, self.memory_length // 8)

    def reorder_free(self, index: np.ndarray) -> bool:
        """Keeps rows `index` where none repeats: only the index changes. False (nothing
        done) where a row repeats."""
        slots = self.alive[index]
        if len(index) > 1 and not np.all(np.diff(index) > 0):  # rows drop in order: free
            if len(np.unique(index)) < len(index):
                return False
            self.identity = False  # permuted
        elif not (len(slots) == 1 or np.all(np.diff(slots) > 0)):
            self.identity = False  # slots out of order: the rows keep their order
        else:
            self.identity &= len(slots) == self.rows
        self.left |= len(slots) < self.rows
        self.alive = slots
        return True

    def fed(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows' new tokens (rows, N) -> every slot's tokens and positions (slots, N):
        a dead slot is fed padding at position 0 (its length may pass the model's last
        position), and counted idle."""
        new = tokens.shape[1]
        positions = self.lengths[:, None] + np.arange(new, dtype=np.int64)
        if self.identity:
            return tokens, positions
        dead = self.dead()
        fed = np.zeros((self.slots, new), dtype=np.int64)
        fed[self.alive] = tokens
        self.idle[dead] += 1
        positions[dead] = 0
        return fed, positions
