"""Model kinds on the exporter's side: one small class per kind, extending models.kinds.

    transformer  TranslatorExport  every graph built op by op   export.translator_parity
    captioner    CaptionerExport   encoder traced, step built   export.caption_parity

A kind holds everything export/ does differently for it: the manifest's preprocessor and
limits, the modules its graphs are traced from and the axes it fixes, how its graphs are
built, its graph-level cases and whole-decode claims, how its golden sources are written and
where its test inputs come from. `export_kind` finds the kind of a model (by its class, through
models.kinds), `export_kind_named` that of a manifest's kind; the rest of export/ asks them
and never which class a model is.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import torch
from PIL import Image
from torch import nn

from export import caption_parity, translator_parity
from export.builder import build_caption_step, build_translator
from export.decode_parity import ParityInputs
from export.graphs import CaptionEncoderGraph, CaptionStepGraph, DecoderStepGraph, EncoderGraph
from export.layout import translator_layout
from export.onnx_export import export_modules
from models.caption_data import read_scenes
from models.catalogs import read_everyday
from models.corpus import read_split
from models.kinds import CaptionerKind, ModelKind, TranslatorKind, model_kind
from models.modern import PART_NAMES, TEST_PARTS
from service.runtime.repository import TOKENIZER, ModelVersion

_EXPORTS: dict[str, ExportKind] = {}


class ExportKind(ModelKind):
    """What export/ does differently for one kind of model."""

    data: ClassVar[str]  # its folder under data/, which holds its test parts
    max_int8_loss: ClassVar[float]  # int8's bound on whole decodes, as certificates record it

    @abstractmethod
    def preprocessor(self, model) -> dict:
        """The manifest's preprocessor: how a request's input becomes the encoder's input."""

    @abstractmethod
    def limits(self, model) -> dict:
        """The manifest's limits."""

    @abstractmethod
    def languages(self, model) -> dict[str, list[str]]:
        """The manifest's languages: what the model reads (`source`, ISO 639-1 codes; none for
        images) and writes (`target`)."""

    @abstractmethod
    def fixed_sizes(self, model) -> dict[str, int]:
        """The sizes of the axes that the model fixes, by axis name."""

    @abstractmethod
    def graph_modules(self, model) -> tuple[nn.Module, nn.Module]:
        """The (encoder, decoder step) modules that the two graphs are traced from."""

    def traced(self, model, out_dir: Path, dtype=torch.float32) -> dict[str, Path]:
        """Writes encoder.onnx and decoder.onnx of `model` (converted to `dtype`) traced by
        torch.export; returns their paths by graph name."""
        model = model.to(dtype).eval()
        modules, fixed = self.graph_modules(model), self.fixed_sizes(model)
        return export_modules(model, modules, fixed, out_dir, dtype)

    def built(self, model, out_dir: Path, dtype=torch.float32) -> dict[str, Path]:
        """Writes the graphs of `model` (converted to float32) in `dtype` (torch.float32 or
        torch.float16), each built op by op where export.builder writes it; returns their
        paths by graph name."""
        out_dir.mkdir(parents=True, exist_ok=True)
        floats = np.float16 if dtype == torch.float16 else np.float32
        with torch.no_grad():
            return self._write_built(model.float().eval(), out_dir, dtype, floats)

    @abstractmethod
    def _write_built(self, model, out_dir: Path, dtype, floats) -> dict[str, Path]:
        """`built`'s graphs of a float32 model in eval mode, without gradients; `floats` is
        `dtype` as numpy's."""

    @abstractmethod
    def graph_cases(self, model, engine, tol, encoder: bool = True) -> list:
        """Every Comparison of the engine's graphs with `model`'s (the encoder's unless
        `encoder` is off; the step's as the engine runs it)."""

    @abstractmethod
    def decode_certificate(self, model, tokenizer, model_version, inputs: ParityInputs) -> dict:
        """Every whole-decode claim on the inputs with their reference texts: "decodes" (the
        DecodeReports), an entry per int8 claim where the version has int8 graphs (on
        `inputs.int8` where given), and whatever else the kind claims."""

    def int8_nodes(self, graph: str, model: onnx.ModelProto) -> list[str] | None:
        """The nodes of the fp32 graph `graph` (as prepared for the quantiser) that int8
        quantises: None for every MatMul and Gemm."""
        return None

    @abstractmethod
    def golden_sources(self, model_version: ModelVersion, sources) -> list[dict]:
        """How each golden source is written into the golden set, in the order given."""

    @abstractmethod
    def parity_inputs(self, data: Path, tokenizer, count: int) -> ParityInputs:
        """Test inputs from `data`, their references, and how many come from each part."""


def _register(kind: type[ExportKind]) -> type[ExportKind]:
    """Class decorator: makes `kind` the exporter's kind of its name."""
    _EXPORTS[kind.name] = kind()
    return kind


@_register
class TranslatorExport(TranslatorKind, ExportKind):
    """The translator: token ids in, every graph built op by op."""

    data = "translator"
    max_int8_loss = translator_parity.MAX_INT8_LOSS
    graph_cases = staticmethod(translator_parity.graph_cases)
    decode_certificate = staticmethod(translator_parity.decode_certificate)

    def preprocessor(self, model) -> dict:
        return {"type": "sentencepiece", "file": TOKENIZER, "appends": "</s>"}

    def limits(self, model) -> dict:
        return {
            "max_source_tokens": model.config.max_length,
            "max_output_tokens": model.config.max_length,
        }

    def languages(self, model) -> dict[str, list[str]]:
        return {"source": ["es"], "target": ["en"]}  # the corpus of models/ is Spanish-English

    def fixed_sizes(self, model) -> dict[str, int]:
        return {"heads": model.config.n_heads, "head_dim": model.config.head_dim}

    def graph_modules(self, model) -> tuple[nn.Module, nn.Module]:
        return EncoderGraph(model), DecoderStepGraph(model)

    def _write_built(self, model, out_dir, dtype, floats):
        return build_translator(translator_layout(model), out_dir, floats)

    def golden_sources(self, model_version, sources) -> list[dict]:
        """Token ids inline."""
        return [{"source_ids": s} for s in sources]

    def parity_inputs(self, data, tokenizer, count):
        """The first `count` sentences of every test part: the Bible test split, `modern`
        where the data has it, `everyday` (committed with the code)."""
        sources, references, parts = [], [], {}
        for split in TEST_PARTS:
            if (data / f"{split}.es").exists():
                spanish, english = read_split(data, split)
            elif split == "test-everyday":
                spanish, english = read_everyday()
            else:
                continue
            sources += tokenizer.encode_batch(spanish[:count])
            references += english[:count]
            parts[PART_NAMES[split]] = len(spanish[:count])
        return ParityInputs(sources, references, parts)


@_register
class CaptionerExport(CaptionerKind, ExportKind):
    """The captioner: images in; its encoder traced, its step built op by op."""

    data = "captioner"
    max_int8_loss = caption_parity.MAX_CAPTION_INT8_LOSS
    graph_cases = staticmethod(caption_parity.graph_cases)
    decode_certificate = staticmethod(caption_parity.decode_certificate)

    def preprocessor(self, model) -> dict:
        c = model.config
        return {
            "type": "image",
            "input": "pixels",
            "size": [c.image_size, c.image_size],
            "channels": "RGB",
            "layout": "NCHW",
            "resize": "bilinear, the whole image to the square (no crop)",
            "scale": "x / 255, float32 in [0, 1]",
            "normalisation": {
                "mean": list(c.pixel_mean),
                "std": list(c.pixel_std),
                "where": "inside the encoder graph",
            },
            "grid": [c.grid, c.grid],
        }

    def limits(self, model) -> dict:
        return {"max_output_tokens": model.config.max_length}

    def languages(self, model) -> dict[str, list[str]]:
        return {"source": [], "target": ["en"]}  # English captions

    def fixed_sizes(self, model) -> dict[str, int]:
        c = model.config
        return {
            "channels": 3,
            "height": c.image_size,
            "width": c.image_size,
            "memory": c.grid * c.grid,
            "features": c.feature_dim,
            "attention": c.attention_dim,
            "hidden": c.hidden_dim,
        }

    def graph_modules(self, model) -> tuple[nn.Module, nn.Module]:
        return CaptionEncoderGraph(model), CaptionStepGraph(model)

    def _write_built(self, model, out_dir, dtype, floats):
        # The convolutional encoder is traced: there is nothing to fuse in it that onnxruntime
        # does not fold itself. The step is built over the traced one; it has no lean form,
        # since its attention is the context it reads.
        paths = self.traced(copy.deepcopy(model), out_dir, dtype)
        onnx.save_model(build_caption_step(model, floats), str(paths["decoder"]))
        return paths

    def golden_sources(self, model_version, sources) -> list[dict]:
        """Each image as a lossless PNG beside the manifest (golden/<i>.png), so the runtime
        reads back the very same pixels."""
        (model_version.directory / "golden").mkdir(exist_ok=True)
        written = []
        for i, image in enumerate(sources):
            relative = f"golden/{i}.png"
            Image.fromarray(np.asarray(image, dtype=np.uint8)).save(
                model_version.directory / relative
            )
            written.append({"image": relative})
        return written

    def int8_nodes(self, graph, model):
        """The MatMuls of the step's LSTM gates, whose weights are most of the step's (their
        columns are the four gates of past.c's width); nothing else. The other MatMuls are
        small, each alone changes captions in int8, and the encoder's run once an image."""
        if graph != "decoder":
            return []
        state = next(i for i in model.graph.input if i.name == "past.c")
        gates = 4 * state.type.tensor_type.shape.dim[1].dim_value
        weights = {i.name: i.dims for i in model.graph.initializer}
        return [
            n.name
            for n in model.graph.node
            if n.op_type == "MatMul" and n.input[1] in weights and weights[n.input[1]][-1] == gates
        ]

    def parity_inputs(self, data, tokenizer, count):
        """`count` test images spread evenly over the test split, with their captions; the
        int8 claim on every image of the split (caption_parity.MAX_CAPTION_INT8_LOSS)."""
        scenes, images = read_scenes(data, "test")
        captions = [s.caption for s in scenes]
        chosen = np.linspace(0, len(scenes) - 1, min(count, len(scenes))).round().astype(int)
        return ParityInputs(
            np.asarray(images[chosen]),
            [captions[i] for i in chosen],
            {"test": len(chosen)},
            int8=(np.asarray(images), captions),
        )


def export_kind(model) -> ExportKind:
    """The exporter's kind of `model`, found by its class (models.kinds.model_kind)."""
    return export_kind_named(model_kind(model).name)


def export_kind_named(name: str) -> ExportKind:
    """The exporter's kind of that name (a manifest's model kind); ValueError for an unknown
    one."""
    if name not in _EXPORTS:
        raise ValueError(f"unknown model kind {name!r} (exported kinds: {sorted(_EXPORTS)})")
    return _EXPORTS[name]
