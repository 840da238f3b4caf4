"""The inference batch of continuous batching: rows of many requests, decoded together.

Requests join between two steps with no past: their cache columns up to the batch's current
length are padding (self mask 0) and their positions start at 0, so a row's numbers do not
depend on when it joined. Rows leave as soon as their search is done. Encoder rows (memory)
are kept once per input and gathered per row only when the set of inputs changes, so beam
reordering does not copy them. When leaving rows make leading cache columns or trailing
memory columns padding for every row, those columns are dropped (compaction), so the cache
of a batch that never empties stays as long as its longest-lived row, not its history.

Every tensor operation goes through the engine (take, join, narrow), so the same code runs
with numpy arrays on a CPU and with device-resident OrtValues on a GPU.
"""

from __future__ import annotations

import numpy as np

from service.inference import EncoderOutput, Engine, Inference

MIN_TRIM = 8  # columns; fewer padding columns than this are not worth a copy of the cache


def join_masks(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Ba, La), (Bb, Lb) -> (Ba + Bb, max L), right-padded with 0."""
    length = max(a.shape[1], b.shape[1])
    out = np.zeros((len(a) + len(b), length), dtype=np.int64)
    out[: len(a), : a.shape[1]] = a
    out[len(a) :, : b.shape[1]] = b
    return out


class ContinuousBatch(Inference):
    """Rows joined by `join`, advanced by `step`, kept or dropped by `reorder`."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._clear()

    def _clear(self) -> None:
        self.encoded: EncoderOutput | None = None  # memory of every input in the batch (E rows)
        self.encoder: EncoderOutput | None = None  # the same, gathered per row
        self.sources = np.zeros(0, dtype=np.int64)  # (B,) the encoded row of each row
        self.past = None
        self.self_mask = np.zeros((0, 0), dtype=np.int64)  # (B, P)
        self.lengths = np.zeros(0, dtype=np.int64)  # tokens fed per row

    @property
    def rows(self) -> int:
        return len(self.sources)

    @property
    def cache_length(self) -> int:
        return self.self_mask.shape[1]

    @property
    def memory_length(self) -> int:
        return 0 if self.encoded is None else self.encoded.memory_mask.shape[1]

    def join(self, encoder: EncoderOutput, sources: np.ndarray) -> None:
        """Adds rows decoding `sources` (rows of `encoder`), after the existing rows."""
        sources = np.asarray(sources, dtype=np.int64)
        rows, memory_mask = len(sources), np.asarray(encoder.memory_mask)
        past = self.engine.empty_past(rows)
        if self.rows == 0:
            self.encoded = EncoderOutput(list(encoder.cross), memory_mask)
            self.sources, self.past = sources, past
            self.self_mask = np.zeros((rows, 0), dtype=np.int64)
            self.lengths = np.zeros(rows, dtype=np.int64)
        else:
            join, encoded = self.engine.join, self.encoded
            offset = len(encoded.memory_mask)
            self.encoded = EncoderOutput(
                [
                    (join(k, new_k), join(v, new_v))
                    for (k, v), (new_k, new_v) in zip(encoded.cross, encoder.cross, strict=True)
                ],
                join_masks(encoded.memory_mask, memory_mask),
            )
            self.sources = np.concatenate([self.sources, sources + offset])
            self.past = [
                (join(k, new_k), join(v, new_v))
                for (k, v), (new_k, new_v) in zip(self.past, past, strict=True)
            ]
            padding = np.zeros((rows, self.cache_length), dtype=np.int64)
            self.self_mask = np.concatenate([self.self_mask, padding])
            self.lengths = np.concatenate([self.lengths, np.zeros(rows, dtype=np.int64)])
        self._gather_encoder()

    def _gather_encoder(self) -> None:
        encoded, sources = self.encoded, self.sources
        if np.array_equal(sources, np.arange(len(encoded.memory_mask))):
            self.encoder = encoded
            return
        take = self.engine.take
        self.encoder = EncoderOutput(
            [(take(k, sources), take(v, sources)) for k, v in encoded.cross],
            encoded.memory_mask[sources],
        )

    def step(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        batch, new = tokens.shape
        positions = self.lengths[:, None] + np.arange(new, dtype=np.int64)
        self.self_mask = np.concatenate([self.self_mask, np.ones((batch, new), np.int64)], 1)
        logits, self.past, cross = self.engine.step(
            tokens, positions, self.self_mask, self.past, self.encoder
        )
        self.lengths = self.lengths + new
        return logits, cross

    def reorder(self, index: np.ndarray) -> None:
        index = np.asarray(index, dtype=np.int64)
        if len(index) == 0:
            self._clear()
            return
        take = self.engine.take
        self.past = [(take(k, index), take(v, index)) for k, v in self.past]
        self.self_mask, self.lengths = self.self_mask[index], self.lengths[index]
        sources = self.sources[index]
        changed = not np.array_equal(sources, self.sources)
        used = np.unique(sources)
        if len(used) < len(self.encoded.memory_mask):  # inputs that left: drop their memory
            self.encoded = EncoderOutput(
                [(take(k, used), take(v, used)) for k, v in self.encoded.cross],
                self.encoded.memory_mask[used],
            )
            sources = np.searchsorted(used, sources)
            changed = True
        self.sources = sources
        changed |= self._compact()
        if changed:
            self._gather_encoder()

    def _compact(self) -> bool:
        """Drops cache columns before every row's first real one and memory columns after
        every input's last real one; True when the memory changed."""
        narrow = self.engine.narrow
        real = np.flatnonzero(self.self_mask.any(axis=0))
        lead = int(real[0]) if len(real) else self.cache_length
        if lead >= max(MIN_TRIM, self.cache_length // 8):
            end = self.cache_length
            self.past = [(narrow(k, lead, end), narrow(v, lead, end)) for k, v in self.past]
            self.self_mask = self.self_mask[:, lead:]
        mask = self.encoded.memory_mask
        real = np.flatnonzero(mask.any(axis=0))
        end = int(real[-1]) + 1 if len(real) else 0
        if mask.shape[1] - end >= max(MIN_TRIM, mask.shape[1] // 8):
            self.encoded = EncoderOutput(
                [(narrow(k, 0, end), narrow(v, 0, end)) for k, v in self.encoded.cross],
                np.ascontiguousarray(mask[:, :end]),
            )
            return True
        return False
