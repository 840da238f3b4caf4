"""Helpers shared by the test suites: paths and small random models."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.shipped import SHIPPED_CAPTIONER as SHIPPED_CAPTIONER
from models.shipped import SHIPPED_TRANSLATOR as SHIPPED_TRANSLATOR

ROOT = Path(__file__).resolve().parents[1]
TRANSLATOR_DATA = ROOT / "data" / "translator"
CAPTIONER_DATA = ROOT / "data" / "captioner"


def tiny_transformer(seed: int = 0, **overrides):
    """A small random model whose outputs are far from uniform (weights scaled up)."""
    import torch

    from models.config import PRESETS
    from models.transformer import Transformer

    config = PRESETS["tiny"]
    if overrides:
        from dataclasses import replace

        config = replace(config, **overrides)
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3.0)
    return model


def random_sources(vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, vocab, size=n).tolist() for n in lengths]


def run_bench(
    module: str, arguments: list[str], markdown: Path, timeout: float
) -> tuple[dict, str]:
    """(JSON report, Markdown) of `python -m <module> --quick --json ... --markdown F`."""
    import json
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", module, "--quick", "--json", *arguments]
    done = subprocess.run(
        [*command, "--markdown", str(markdown)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout), markdown.read_text(encoding="utf-8")


def perturb_near_logits(path: Path, amount: float = 0.05) -> str:
    """Adds `amount` to 8 channels of the 1-D float weight nearest the step's `logits` (a
    layer norm's scale or an output bias, traced or built alike); returns its name."""
    from collections import deque

    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(path))
    graph = proto.graph
    weights = {i.name: i for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    queue, seen = deque(["logits"]), set()
    while queue:
        node = producers.get(queue.popleft())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        for name in node.input:
            weight = weights.get(name)
            if weight is not None and len(weight.dims) == 1 and weight.data_type in (1, 10):
                values = numpy_helper.to_array(weight).copy()
                values[:8] += amount
                weight.CopyFrom(numpy_helper.from_array(values, weight.name))
                onnx.save(proto, str(path))
                return name
        queue.extend(node.input)
    raise ValueError(f"{path}: no 1-D float weight leads to logits")


def built_tiny_translator(directory: Path, tokenizer, seed: int, variants: tuple[str, ...]):
    """(model, version): a tiny random translator (3 decoder layers, the middle one's
    cross-attention returned) written op by op into `directory` with `variants`."""
    from dataclasses import replace

    import torch

    from export.repository import write_version
    from models.config import PRESETS
    from models.transformer import Transformer

    config = replace(
        PRESETS["tiny"], vocab_size=tokenizer.vocab_size, decoder_layers=3, cross_attention_layer=1
    )
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    version = write_version(
        model, tokenizer.model_file, directory, "tiny", "1", variants, method="built"
    )
    return model, version


def tiny_marian(seed: int = 0):
    """A small random Marian (transformers), pad 95, end 0: OPUS-MT's layout."""
    import torch
    import transformers

    config = transformers.MarianConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=95, eos_token_id=0,
        decoder_start_token_id=95, forced_eos_token_id=None, bad_words_ids=[[95]],
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.MarianMTModel(config).eval()


def tiny_m2m100(seed: int = 2):
    """A small random M2M100 (transformers), fairseq's ids (pad 1, end 2); its default seed
    writes greedy decodes of several tokens."""
    import torch
    import transformers

    config = transformers.M2M100Config(
        vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, eos_token_id=2,
        decoder_start_token_id=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.M2M100ForConditionalGeneration(config).eval()
