"""A converted checkpoint decodes in CTranslate2 exactly as in PyTorch (greedy, float32).

This pins the layout CTranslate2 assumes and generates itself: fused Q|K|V and K|V linears,
embeddings scaled by sqrt(D), and sinusoid positions at t + 1 in [sin | cos] halves.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")
torch = pytest.importorskip("torch")

from ctranslate2.specs import transformer_spec  # noqa: E402

from bench.ctranslate2_convert import convert  # noqa: E402
from models.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from models.config import TransformerConfig  # noqa: E402
from models.reference import TorchEngine  # noqa: E402
from models.tokenizer import train_tokenizer  # noqa: E402
from models.transformer import Transformer, sinusoids  # noqa: E402
from service.runtime.decoding import DecodingOptions  # noqa: E402
from service.runtime.translation import translate_ids  # noqa: E402

MAX_LENGTH = 24  # decoding steps, `</s>` included


def _checkpoint(tmp_path: Path, position_offset: int = 1) -> Path:
    """A tiny random model with sharpened weights (varied, non-degenerate greedy output)."""
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "gu", "ba", "zo"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(4000)]
    lines = [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)]
    tokenizer_file = tmp_path / "tokenizer.model"
    tokenizer = train_tokenizer(lines, tokenizer_file, vocab_size=320)
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=tokenizer.vocab_size,
        d_model=64,
        n_heads=4,
        d_ff=128,
        encoder_layers=2,
        decoder_layers=2,
        position_offset=position_offset,
    )
    model = Transformer(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embedding" in name:
                parameter.mul_(0.5)  # positions then matter as much as tokens
            elif parameter.dim() > 1:
                parameter.mul_(4.0)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.5)
            else:
                parameter.normal_(1.0, 0.3)
        model.source_embedding.weight[2] *= 4.0  # `</s>` now and then, even first
    save_checkpoint(model, tokenizer_file, tmp_path / "checkpoint")
    return tmp_path / "checkpoint"


def _sources(vocab_size: int) -> list[list[int]]:
    """20 random sources of 1-39 ids, without `</s>`."""
    rng = np.random.default_rng(0)
    return [rng.integers(4, vocab_size, size=n).tolist() for n in rng.integers(1, 40, size=20)]


def _ct2_greedy(model_dir: Path, pieces: list[list[str]]):
    """Greedy results; min_decoding_length=0 because CTranslate2's default of 1 forbids `</s>`
    at the first step. Scores are log-prob / steps, as `Hypothesis.score` with penalty 1."""
    translator = ctranslate2.Translator(str(model_dir), intra_threads=1, inter_threads=1)
    return translator.translate_batch(
        pieces,
        beam_size=1,
        return_scores=True,
        max_decoding_length=MAX_LENGTH,
        min_decoding_length=0,
    )


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_generated_position_encodings_are_ours_at_offset_1(tmp_path):
    """A one-layer encoder with zero embeddings and zero sublayers outputs its encodings."""
    d, length = 64, 40
    spec = transformer_spec.TransformerEncoderModelSpec(
        transformer_spec.TransformerEncoderSpec(1, 4, pre_norm=True, no_final_norm=True)
    )
    spec.encoder.embeddings[0].weight = np.zeros((4, d), np.float32)
    layer = spec.encoder.layer[0]
    for norm in (layer.self_attention.layer_norm, layer.ffn.layer_norm):
        norm.gamma, norm.beta = np.ones(d, np.float32), np.zeros(d, np.float32)
    layer.self_attention.linear[0].weight = np.zeros((3 * d, d), np.float32)
    layer.self_attention.linear[1].weight = np.zeros((d, d), np.float32)
    layer.ffn.linear_0.weight = np.zeros((2 * d, d), np.float32)
    layer.ffn.linear_1.weight = np.zeros((d, 2 * d), np.float32)
    spec.register_vocabulary(["<blank>", "<s>", "</s>", "<unk>"])
    spec.validate()
    (tmp_path / "ct2").mkdir()
    spec.save(str(tmp_path / "ct2"))
    encoder = ctranslate2.Encoder(str(tmp_path / "ct2"), intra_threads=1)
    output = encoder.forward_batch([["<unk>"] * length]).last_hidden_state
    generated = np.array(output)[0]  # (length, d)
    positions = torch.arange(length)
    np.testing.assert_allclose(generated, sinusoids(positions, d, 1).numpy(), atol=1e-6)
    assert np.abs(generated - sinusoids(positions, d, 0).numpy()).max() > 0.5


def test_greedy_output_and_scores_match_pytorch(tmp_path):
    checkpoint = _checkpoint(tmp_path)
    model_dir = convert(checkpoint, tmp_path / "ct2")
    model, tokenizer = load_checkpoint(checkpoint)
    sources = _sources(tokenizer.vocab_size)
    # CTranslate2 bounds an output by max_length alone
    options = DecodingOptions(beam_size=1, max_length=MAX_LENGTH, max_length_ratio=0.0)
    ours = translate_ids(TorchEngine(model), sources, options, model.config.max_length)
    theirs = _ct2_greedy(model_dir, [tokenizer.pieces(s) for s in sources])
    ids = {piece: i for i, piece in enumerate(tokenizer.vocabulary())}
    for hyps, result in zip(ours, theirs, strict=True):
        assert [ids[p] for p in result.hypotheses[0]] == hyps[0].tokens
        assert result.scores[0] == pytest.approx(hyps[0].score, abs=1e-4)
    assert len({t for hyps in ours for t in hyps[0].tokens}) > 10
    assert 0 < sum(hyps[0].finished for hyps in ours) < len(sources)

    shifted = Transformer(TransformerConfig(**{**model.config.to_dict(), "position_offset": 0}))
    shifted.load_state_dict(model.state_dict())
    other = translate_ids(TorchEngine(shifted), sources, options, model.config.max_length)
    gaps = [abs(r.scores[0] - h[0].score) for h, r in zip(other, theirs, strict=True)]
    assert max(gaps) > 0.05, "the comparison must be sensitive to the position layout"


def test_other_position_offsets_are_refused(tmp_path):
    checkpoint = _checkpoint(tmp_path, position_offset=0)
    with pytest.raises(ValueError, match="position_offset 0"):
        convert(checkpoint, tmp_path / "ct2")
