"""Marian as the runtime's two graphs (export.hf.marian), in PyTorch against `transformers`'
own model: the step's logits under teacher forcing, and greedy decodes equal to `generate`'s,
on a small random model with a batch of unequal lengths."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_marian

from export.hf.graphs import modules
from export.hf.layers import Encoder, greedy_decode
from export.hf.marian import MarianStep

transformers = pytest.importorskip("transformers")  # the hf extra, installed by ./dev.sh

PAD, EOS = 95, 0


@pytest.fixture(scope="module")
def marian():
    return tiny_marian()


def sources():
    ids = torch.tensor([[5, 17, 33, 8, 61, EOS], [44, 9, EOS, PAD, PAD, PAD]])
    return ids, (ids != PAD).long()


def test_the_step_reproduces_the_models_logits_token_by_token(marian):
    src_ids, src_mask = sources()
    decoder_ids = torch.tensor([[PAD, 7, 12, 30, 2], [PAD, 50, 3, 3, 9]])
    with torch.no_grad():
        expected = marian(
            input_ids=src_ids, attention_mask=src_mask, decoder_input_ids=decoder_ids
        ).logits
        memory_mask, *cross = Encoder(marian)(src_ids, src_mask)
        step = MarianStep(marian)
        heads = marian.config.decoder_attention_heads
        past = [torch.zeros(2, heads, 0, 32 // heads) for _ in range(4)]
        for t in range(decoder_ids.shape[1]):
            self_mask = torch.ones(2, t + 1, dtype=torch.long)
            positions = torch.full((2, 1), t)
            logits, *state = step(
                decoder_ids[:, t : t + 1], positions, self_mask, *past, *cross, memory_mask
            )
            past, attention = state[:-1], state[-1]
            assert torch.allclose(logits, expected[:, t], atol=1e-5, rtol=1e-4), t
            assert attention.shape == (2, 6)
            assert torch.allclose(attention.sum(-1), torch.ones(2), atol=1e-5)
            assert float(attention[1, 3:].abs().max()) == 0.0  # padding gets no attention
    assert expected.std() > 10 * 1e-5  # the logits differ far beyond the bound


def test_the_step_takes_several_new_tokens_at_once(marian):
    src_ids, src_mask = sources()
    decoder_ids = torch.tensor([[PAD, 7, 12, 30], [PAD, 50, 3, 3]])
    with torch.no_grad():
        expected = marian(
            input_ids=src_ids, attention_mask=src_mask, decoder_input_ids=decoder_ids
        ).logits
        memory_mask, *cross = Encoder(marian)(src_ids, src_mask)
        empty = [torch.zeros(2, 4, 0, 8) for _ in range(4)]
        logits, *_ = MarianStep(marian)(
            decoder_ids, torch.arange(4).expand(2, 4), torch.ones(2, 4, dtype=torch.long),
            *empty, *cross, memory_mask,
        )  # fmt: skip
    assert torch.allclose(logits, expected[:, -1], atol=1e-5, rtol=1e-4)


def test_greedy_through_the_graphs_is_generates_greedy(marian):
    src_ids, src_mask = sources()
    with torch.no_grad():
        generated = marian.generate(
            input_ids=src_ids, attention_mask=src_mask, num_beams=1, do_sample=False,
            max_new_tokens=20,
        )  # fmt: skip
    ours = greedy_decode(*modules(marian), marian.config, src_ids, src_mask, 20)
    for row, tokens in enumerate(ours):
        theirs = generated[row, 1:].tolist()  # after the decoder's start token
        if EOS in theirs:
            theirs = theirs[: theirs.index(EOS) + 1]
        assert tokens == theirs, row
    # decodes that say something: several different tokens each (a random model this small
    # writes nearly the same for any source; the logits test holds the source's part)
    assert all(len(set(tokens)) >= 4 for tokens in ours)
