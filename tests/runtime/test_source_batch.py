"""Sources as the encoder takes them (service.runtime.batching.source_batch): the model's own
`</s>` appended (our translator's 2, Marian's 0), cut to the limit, padded and masked."""

from __future__ import annotations

from service.runtime.batching import source_batch
from service.runtime.tokenizer import EOS_ID


def test_the_models_end_token_closes_every_source():
    ids, mask = source_batch([[5, 6, 7], [8]], max_length=3)
    assert ids.tolist() == [[5, 6, EOS_ID], [8, EOS_ID, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    marian, _ = source_batch([[5, 6, 7], [8]], max_length=8, eos=0)
    assert marian.tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    _, marian_mask = source_batch([[5, 6, 7], [8]], max_length=8, eos=0)
    assert marian_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]  # the end token is real
