"""A Hugging Face translation model as the runtime's graphs: its architecture recognised from
its config, then either every graph our own translator ships built op by op from its weights
(export.hf.layout, export.builder: fused attention, the lean step with the search folded in,
the cache written in place, the static step), or its encoder and cached step
(export.hf.marian, export.hf.m2m100, export.hf.mbart) traced. Both are the translator's
interface (service.runtime.graphs.transformer_interface): the graphs take and return what
the runtime's engine feeds our own translator's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from export.builder import build_translator
from export.hf.layers import Encoder
from export.hf.layout import hf_layout
from export.hf.m2m100 import M2M100Step
from export.hf.marian import MarianStep
from export.hf.mbart import MBartStep
from export.onnx_export import example_inputs, export_graph
from service.runtime.graphs import ModelInterface, transformer_interface
from service.runtime.onnx_runtime import banned_bias

ARCHITECTURES = {  # config.model_type -> the step module (the encoder is the family's own)
    "marian": MarianStep,  # OPUS-MT
    "m2m_100": M2M100Step,  # M2M100 and NLLB-200
    "mbart": MBartStep,  # mBART-50 (its many-to-many and one-to-many translators)
}
REFUSED = {  # config.model_type -> why it is not taken (yet)
    "t5": "relative position buckets in every layer: not the step contract's positions",
    "mt5": "relative position buckets in every layer: not the step contract's positions",
    "bart": "a byte-level BPE tokenizer (GPT-2's): the runtime reads SentencePiece models",
    "fsmt": "not certified here",
    "whisper": "reads audio features, not text",
    "encoder-decoder": "a pair of arbitrary models: no one step to trace",
}


def architecture(config) -> str:
    """The model's architecture by its config's `model_type`; ValueError saying why one is
    refused."""
    kind = getattr(config, "model_type", None)
    if kind in ARCHITECTURES:
        return kind
    why = REFUSED.get(kind, "not an encoder-decoder translation architecture attnserve knows")
    known = ", ".join(sorted(ARCHITECTURES))
    raise ValueError(f"model_type {kind!r}: {why} (taken: {known})")


def interface(config) -> ModelInterface:
    return transformer_interface(config.decoder_layers)


class Banning(nn.Module):
    """A step whose logits are -inf at the tokens `generate` never writes (bad_words_ids)."""

    def __init__(self, step: nn.Module, vocab: int, banned):
        super().__init__()
        self.step = step
        self.register_buffer("bias", torch.from_numpy(banned_bias(banned, vocab)[0]))

    def forward(self, *inputs):
        logits, *rest = self.step(*inputs)
        return (logits + self.bias.to(logits.dtype), *rest)


def modules(model, banned=()):
    """(encoder, step) modules of the model, in eval mode; the step's logits -inf at
    `banned`."""
    step = ARCHITECTURES[architecture(model.config)](model)
    if banned:
        step = Banning(step, model.config.vocab_size, banned)
    return Encoder(model).eval(), step.eval()


def export_graphs(model, out_dir: Path, dtype=torch.float32, banned=()) -> dict[str, Path]:
    """Writes encoder.onnx and decoder.onnx of `model` under the translator's interface (the
    step's logits -inf at `banned`); their paths by graph name."""
    config = model.config
    heads = config.decoder_attention_heads
    fixed = {"heads": heads, "head_dim": config.d_model // heads}
    model = model.to(dtype).eval()
    specs = interface(config)
    paths = {}
    with torch.no_grad():
        for spec, module in zip(
            (specs.encoder, specs.decoder), modules(model, banned), strict=True
        ):
            args = example_inputs(fixed, spec, config.vocab_size, dtype)
            paths[spec.name] = export_graph(module, spec, args, out_dir / f"{spec.name}.onnx")
    return paths


def build_graphs(model, out_dir: Path, dtype=torch.float32, banned=()) -> dict[str, Path]:
    """Writes every graph of `model` (float32, eval mode) built op by op in `dtype`, as our
    own translator's (export.builder.build_translator), the step's logits -inf at `banned`;
    their paths by graph name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    floats = np.float16 if dtype == torch.float16 else np.float32
    with torch.no_grad():
        layout = hf_layout(model.float().eval(), architecture(model.config), banned)
        return build_translator(layout, out_dir, floats)
