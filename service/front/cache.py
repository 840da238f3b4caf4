"""The front's response cache: an input's decoded n-best, kept for the same input again.

An entry is one input of a request (a sentence of a text, an image) with the model version
that served it and everything that shapes its hypotheses (the decoding options and what is
returned with them); a sentence of a long text is cached as a sentence, so repeated
boilerplate decodes once. Sampling is cached only with a seed (the same seed, input and
version give the same samples); without one every call draws anew. The cache is a bounded
LRU, by entries and by bytes (what its objects hold in memory, estimated by `_size`), in each
front process; 0 for either bound turns it off.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict

from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.kinds import Prepared, ServedModel

# what an entry costs in CPython's objects, measured with tracemalloc (hypotheses as they
# come unpickled from a worker): its key (a tuple with the options' own), the entry and the
# dict's slot; a hypothesis object with its lists; a token id in a list or tuple (its slot
# and an int of 28 bytes, 32 as allocated); a log-probability (its slot and a float of 24); a
# tuple of token ids (a suppressed sequence: its header and its slot in the tuple of them)
ENTRY_OVERHEAD = 1_536
HYPOTHESIS_BYTES = 512
INT_BYTES = 40
FLOAT_BYTES = 32
TUPLE_BYTES = 64
_serials = itertools.count()


def _size(key: tuple, hypotheses: list[Hypothesis]) -> int:
    """Bytes an entry holds: its key's input (bytes), options (their suppressed sequences:
    counted by every entry of a request, whose entries share them) and forced prefix (ids),
    and its hypotheses' tokens, log-probabilities and alignments."""
    size = ENTRY_OVERHEAD
    for part in key:
        if isinstance(part, bytes):
            size += len(part)
        elif isinstance(part, DecodingOptions):
            size += sum(TUPLE_BYTES + INT_BYTES * len(s) for s in part.suppress)
        elif isinstance(part, tuple) and part and isinstance(part[0], int):
            size += INT_BYTES * len(part)
    for h in hypotheses:
        size += HYPOTHESIS_BYTES + INT_BYTES * len(h.tokens)
        size += FLOAT_BYTES * len(h.token_log_probs)
        if h.alignment is not None:
            size += h.alignment.nbytes
    return size


class ResponseCache:
    def __init__(self, entries: int, max_bytes: int, metrics=None):
        self.max_entries, self.max_bytes = entries, max_bytes
        self.metrics = metrics
        self.entries: OrderedDict[tuple, tuple[list[Hypothesis], int]] = OrderedDict()
        self.bytes = 0
        # a number for each model object (a version loaded again is a new object, with new
        # entries); numbers are never reused, so old entries never meet a new object
        self._serials: weakref.WeakKeyDictionary[ServedModel, int] = weakref.WeakKeyDictionary()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0

    def _serial(self, model: ServedModel) -> int:
        serial = self._serials.get(model)
        if serial is None:
            serial = self._serials[model] = next(_serials)
        return serial

    def keys(self, model: ServedModel, prepared: Prepared) -> list[tuple | None]:
        """Each input's key, or None for each when the request cannot be cached."""
        if not self.enabled or prepared.keys is None:
            return [None] * prepared.inputs
        options = prepared.options
        if options.temperature > 0 and options.seed is None:
            return [None] * prepared.inputs  # unseeded samples differ on every call
        shape = (
            self._serial(model),
            options,  # frozen, hashable: the request's own object, held (no copy of it)
            prepared.keep_alignment,
            prepared.keep_log_probs,
        )
        controls = prepared.controls
        if controls is None:
            return [(*shape, key) for key in prepared.keys]
        lengths = controls.max_lengths or (None,) * prepared.inputs
        prefixes = controls.prefixes or ((),) * prepared.inputs
        parts = zip(prepared.keys, lengths, prefixes, strict=True)
        return [(*shape, key, length, prefix) for key, length, prefix in parts]

    def get(self, key: tuple | None, model: str) -> list[Hypothesis] | None:
        """The n-best held for `key` (None: none, or a key that cannot be cached), counted a
        hit of `model`; a miss is counted once its input is sent to decode (`missed`)."""
        if key is None:
            return None
        found = self.entries.get(key)
        if found is None:
            return None
        if self.metrics is not None:
            self.metrics.cache_hits.labels(model).inc()
        self.entries.move_to_end(key)
        return found[0]

    def missed(self, model: str, inputs: int) -> None:
        """Counts `inputs` of `model` that could be cached, were not held, and are decoded."""
        if self.metrics is not None and inputs:
            self.metrics.cache_misses.labels(model).inc(inputs)

    def put(self, key: tuple | None, hypotheses: list[Hypothesis]) -> None:
        if key is None or key in self.entries:
            return
        size = _size(key, hypotheses)
        if size > self.max_bytes:
            return
        self.entries[key] = (hypotheses, size)
        self.bytes += size
        while len(self.entries) > self.max_entries or self.bytes > self.max_bytes:
            _, (_, dropped) = self.entries.popitem(last=False)
            self.bytes -= dropped
        if self.metrics is not None:
            self.metrics.cache_entries.set(len(self.entries))
            self.metrics.cache_bytes.set(self.bytes)
