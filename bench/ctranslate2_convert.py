"""An attnserve checkpoint as a CTranslate2 model directory, for benchmarks only.

CTranslate2 generates its own sinusoid position encodings: position t (from 0) is encoded at
t + 1, as [sin | cos] halves with timescale step ln(10000) / (D/2 - 1). That equals
`models.transformer.sinusoids` only with `position_offset == 1`, so other offsets are refused
rather than converted into a model that silently decodes differently.

Weight layout: self-attention Q, K, V fused into one linear (rows in that order, (3D, D));
cross-attention query alone, its K, V fused ((2D, D)); embeddings unscaled (CTranslate2
multiplies by sqrt(D) itself); the output projection is the tied embedding, without bias.
The saved config appends `</s>` to sources and starts decoding from `<s>`, as
`service.runtime.translation.translate_ids` does, so sources are passed as pieces without `</s>`.
Alignments (`return_attention`) average every head of `cross_attention_layer`, as ours do.

    python -m bench.ctranslate2_convert CHECKPOINT_DIR OUT_DIR [--quantization int8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ctranslate2
import numpy as np
import torch
from ctranslate2.specs import common_spec, transformer_spec
from torch import nn

from models.checkpoint import load_checkpoint
from models.transformer import FeedForward, MultiHeadAttention, Transformer

CT2_POSITION_OFFSET = 1  # CTranslate2 encodes position t at t + 1


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.float32).cpu().numpy()


def _set_linear(spec: common_spec.LinearSpec, *linears: nn.Linear) -> None:
    """Weights (sum of out, in) and biases of `linears`, stacked in the given order."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    if all(linear.bias is not None for linear in linears):
        spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _set_norm(spec: common_spec.LayerNormSpec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _set_attention(spec, attention: MultiHeadAttention, norm: nn.LayerNorm, fused: bool) -> None:
    """fused: self-attention, one (3D, D) Q|K|V linear; else query, then a (2D, D) K|V one."""
    _set_norm(spec.layer_norm, norm)
    if fused:
        _set_linear(spec.linear[0], attention.query, attention.key, attention.value)
    else:
        _set_linear(spec.linear[0], attention.query)
        _set_linear(spec.linear[1], attention.key, attention.value)
    _set_linear(spec.linear[-1], attention.out)


def _set_ffn(spec, ff: FeedForward, norm: nn.LayerNorm) -> None:
    _set_norm(spec.layer_norm, norm)
    _set_linear(spec.linear_0, ff[0])
    _set_linear(spec.linear_1, ff[3])


def build_spec(model: Transformer, vocabulary: list[str]) -> transformer_spec.TransformerSpec:
    """The CTranslate2 spec of `model` with every weight set; `vocabulary` in id order.

    Position encodings are left to CTranslate2 (not stored), whatever `position_offset` is.
    """
    c = model.config
    if not c.share_embeddings or not c.tie_output:
        raise ValueError("only shared embeddings with a tied output projection are supported")
    spec = transformer_spec.TransformerSpec.from_config(
        (c.encoder_layers, c.decoder_layers),
        c.n_heads,
        pre_norm=True,
        activation=common_spec.Activation.RELU,
        alignment_layer=c.cross_attention_layer,
        alignment_heads=c.n_heads,
    )
    embedding = _array(model.source_embedding.weight)  # (V, D), unscaled
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = embedding
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, True)
        _set_ffn(layer_spec.ffn, layer.ff, layer.ff_norm)
    _set_norm(encoder.layer_norm, model.encoder_norm)
    decoder.embeddings.weight = embedding
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, True)
        _set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, False)
        _set_ffn(layer_spec.ffn, layer.ff, layer.ff_norm)
    _set_norm(decoder.layer_norm, model.decoder_norm)
    _set_linear(decoder.projection, model.output)
    spec.config.layer_norm_epsilon = model.encoder_norm.eps
    spec.config.add_source_eos = True
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    spec.validate()
    return spec


def convert(checkpoint_dir: Path, out_dir: Path, quantization: str = "float32") -> Path:
    """Writes model.bin, config.json and the vocabularies of a checkpoint to `out_dir`.

    quantization: any CTranslate2 weight type (float32, float16, int8, int8_float32, ...).
    """
    model, tokenizer = load_checkpoint(Path(checkpoint_dir))
    if model.config.position_offset != CT2_POSITION_OFFSET:
        raise ValueError(
            f"position_offset {model.config.position_offset}: CTranslate2 generates "
            f"sinusoids at t + {CT2_POSITION_OFFSET} and would decode differently"
        )
    spec = build_spec(model, tokenizer.vocabulary())
    spec.optimize(quantization=quantization)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--quantization", default="float32")
    args = parser.parse_args(argv)
    out = convert(args.checkpoint_dir, args.out_dir, args.quantization)
    print(f"wrote {out} (CTranslate2 {ctranslate2.__version__}, {args.quantization})")


if __name__ == "__main__":
    main()
