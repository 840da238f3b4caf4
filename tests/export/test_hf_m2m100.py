"""M2M100 and mBART-50 as the runtime's two graphs (export.hf.m2m100, export.hf.mbart), in
PyTorch against `transformers`' own model: the step's logits under teacher forcing and with
the model's own cache, and greedy decodes with the target language forced first equal to
`generate`'s, on small random models with a padded batch."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_m2m100, tiny_mbart

from export.hf.graphs import modules
from export.hf.layers import Encoder, greedy_decode
from export.hf.m2m100 import M2M100Step
from export.hf.mbart import MBartStep

transformers = pytest.importorskip("transformers")  # the hf extra, installed by ./dev.sh

PAD, EOS, LANGUAGE = 1, 2, 120  # fairseq's ids; a language token at the vocabulary's end


@pytest.fixture(scope="module", params=["m2m100", "mbart"])
def family(request):
    """(a model, its step module): M2M100 and mBART-50, the families whose languages are
    tokens."""
    if request.param == "mbart":
        return tiny_mbart(), MBartStep
    return tiny_m2m100(), M2M100Step


def sources():
    ids = torch.tensor([[121, 17, 33, 8, 61, EOS], [121, 44, 9, EOS, PAD, PAD]])
    return ids, (ids != PAD).long()


def test_the_step_reproduces_the_models_logits_token_by_token(family):
    model, step_of = family
    src_ids, src_mask = sources()
    decoder_ids = torch.tensor([[EOS, LANGUAGE, 7, 12, 30], [EOS, LANGUAGE, 50, 3, 9]])
    with torch.no_grad():
        expected = model(
            input_ids=src_ids, attention_mask=src_mask, decoder_input_ids=decoder_ids
        ).logits
        memory_mask, *cross = Encoder(model)(src_ids, src_mask)
        step = step_of(model)
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


def test_greedy_with_the_language_forced_is_generates_greedy(family):
    model, _ = family
    src_ids, src_mask = sources()
    with torch.no_grad():
        generated = model.generate(
            input_ids=src_ids, attention_mask=src_mask, num_beams=1, do_sample=False,
            max_new_tokens=20, forced_bos_token_id=LANGUAGE,
        )  # fmt: skip
    ours = greedy_decode(*modules(model), model.config, src_ids, src_mask, 20, (LANGUAGE,))
    for row, tokens in enumerate(ours):
        theirs = generated[row, 1:].tolist()  # after the decoder's start token
        if EOS in theirs:
            theirs = theirs[: theirs.index(EOS) + 1]
        assert tokens == theirs, row
        assert tokens[0] == LANGUAGE
    assert all(len(set(tokens)) >= 4 for tokens in ours)


def test_a_padding_token_fed_is_stepped_as_the_models_own_step_does(family):
    """A decoder that writes the padding id (a random model may) is fed it back: M2M100's
    own cached step gives it the padding id's position row (zeros), and the tokens after it
    their own positions; mBART's learned positions ignore it. The step does the same, so
    beam search follows generate past it."""
    model, step_of = family
    src_ids, src_mask = sources()
    decoder_ids = torch.tensor([[EOS, LANGUAGE, 7, PAD, 30, 9], [EOS, LANGUAGE, PAD, 3, 9, 12]])
    step, memory_mask, *cross = step_of(model), *Encoder(model)(src_ids, src_mask)
    past, theirs = [torch.zeros(2, 4, 0, 8) for _ in range(4)], None
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=src_ids, attention_mask=src_mask)
        for t in range(decoder_ids.shape[1]):
            token = decoder_ids[:, t : t + 1]
            out = model(
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
