"""M2M100 as the runtime's two graphs (export.hf.m2m100), in PyTorch against `transformers`'
own model: the step's logits under teacher forcing, and greedy decodes with the target
language forced first equal to `generate`'s, on a small random model with a padded batch."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_m2m100

from export.hf.graphs import modules
from export.hf.layers import Encoder, greedy_decode
from export.hf.m2m100 import M2M100Step

transformers = pytest.importorskip("transformers")  # the hf extra, installed by ./dev.sh

PAD, EOS, LANGUAGE = 1, 2, 120  # fairseq's ids; a language token at the vocabulary's end


@pytest.fixture(scope="module")
def m2m100():
    return tiny_m2m100()


def sources():
    ids = torch.tensor([[121, 17, 33, 8, 61, EOS], [121, 44, 9, EOS, PAD, PAD]])
    return ids, (ids != PAD).long()


def test_the_step_reproduces_the_models_logits_token_by_token(m2m100):
    src_ids, src_mask = sources()
    decoder_ids = torch.tensor([[EOS, LANGUAGE, 7, 12, 30], [EOS, LANGUAGE, 50, 3, 9]])
    with torch.no_grad():
        expected = m2m100(
            input_ids=src_ids, attention_mask=src_mask, decoder_input_ids=decoder_ids
        ).logits
        memory_mask, *cross = Encoder(m2m100)(src_ids, src_mask)
        step = M2M100Step(m2m100)
        past = [torch.zeros(2, 4, 0, 8) for _ in range(4)]
        for t in range(decoder_ids.shape[1]):
            logits, *state = step(
                decoder_ids[:, t : t + 1], torch.full((2, 1), t),
                torch.ones(2, t + 1, dtype=torch.long), *past, *cross, memory_mask,
            )  # fmt: skip
            past, attention = state[:-1], state[-1]
            assert torch.allclose(logits, expected[:, t], atol=1e-5, rtol=1e-4), t
            assert torch.allclose(attention.sum(-1), torch.ones(2), atol=1e-5)
            assert float(attention[1, 4:].abs().max()) == 0.0  # padding gets no attention
    assert expected.std() > 10 * 1e-5


def test_greedy_with_the_language_forced_is_generates_greedy(m2m100):
    src_ids, src_mask = sources()
    with torch.no_grad():
        generated = m2m100.generate(
            input_ids=src_ids, attention_mask=src_mask, num_beams=1, do_sample=False,
            max_new_tokens=20, forced_bos_token_id=LANGUAGE,
        )  # fmt: skip
    ours = greedy_decode(*modules(m2m100), m2m100.config, src_ids, src_mask, 20, (LANGUAGE,))
    for row, tokens in enumerate(ours):
        theirs = generated[row, 1:].tolist()  # after the decoder's start token
        if EOS in theirs:
            theirs = theirs[: theirs.index(EOS) + 1]
        assert tokens == theirs, row
        assert tokens[0] == LANGUAGE
    assert all(len(set(tokens)) >= 4 for tokens in ours)


def test_a_padding_token_fed_takes_the_padding_position_as_the_models_own_step(m2m100):
    """A decoder that writes the padding id (a random model may) is fed it back: the
    model's own cached step gives it the padding id's position row (zeros), and the tokens
    after it their own positions. The step does the same, so beam search follows generate
    past it."""
    src_ids, src_mask = sources()
    decoder_ids = torch.tensor([[EOS, LANGUAGE, 7, PAD, 30, 9], [EOS, LANGUAGE, PAD, 3, 9, 12]])
    step, memory_mask, *cross = M2M100Step(m2m100), *Encoder(m2m100)(src_ids, src_mask)
    past, theirs = [torch.zeros(2, 4, 0, 8) for _ in range(4)], None
    with torch.no_grad():
        encoded = m2m100.get_encoder()(input_ids=src_ids, attention_mask=src_mask)
        for t in range(decoder_ids.shape[1]):
            token = decoder_ids[:, t : t + 1]
            out = m2m100(
                encoder_outputs=encoded, attention_mask=src_mask, decoder_input_ids=token,
                past_key_values=theirs, use_cache=True,
            )  # fmt: skip
            theirs = out.past_key_values
            logits, *state = step(
                token, torch.full((2, 1), t), torch.ones(2, t + 1, dtype=torch.long), *past,
                *cross, memory_mask,
            )  # fmt: skip
            past = state[:-1]
            assert torch.allclose(logits, out.logits[:, -1], atol=1e-5, rtol=1e-4), t
