"""Model kinds on the PyTorch side: one small class per kind, registered by its name and by its
model class.

    transformer  TranslatorKind  Transformer, TransformerConfig  token ids in
    captioner    CaptionerKind   Captioner, CaptionerConfig      uint8 images in

A kind holds what differs between them below the exporter: the name (the manifest's model kind
and the checkpoint format's), the config and model classes, its declared interface, and how a
batch of its sources is decoded on any `Engine`. `model_kind` finds a model's kind by its
class, `kind_named` by name; nothing else in models/ or export/ asks which class a model is.
The exporter's side of each kind (export.kinds) extends these classes; the PyTorch reference
engine of each kind is registered in models.reference.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from torch import nn

from models.captioner import Captioner
from models.config import CaptionerConfig, TransformerConfig
from models.transformer import Transformer
from service.runtime.batching import source_batch
from service.runtime.captioning import caption_batches, pixels
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.graphs import ModelInterface, interface_for
from service.runtime.inference import Engine, Inference
from service.runtime.tensors import EncoderOutput
from service.runtime.translation import translate_batches

_BY_NAME: dict[str, ModelKind] = {}
_BY_CLASS: dict[type[nn.Module], ModelKind] = {}


class ModelKind(ABC):
    """What one kind of model is, on the PyTorch side."""

    name: ClassVar[str]  # the manifest's model kind; the checkpoint format is attnserve-<name>-1
    config_class: ClassVar[type]
    model_class: ClassVar[type[nn.Module]]

    def interface(self, config) -> ModelInterface:
        """The declared interface (service.runtime.graphs) of this kind's model with `config`."""
        return interface_for(self.name, config.to_dict())

    @abstractmethod
    def decode(
        self,
        engine: Engine,
        sources: Sequence[Any],
        options: DecodingOptions,
        max_source: int,
        batch: int,
        inference_type: type[Inference],
        attention: bool = True,
    ) -> list[list[Hypothesis]]:
        """n-best hypotheses of every source, in batches of `batch` taken in input order
        (without alignments or attention when `attention` is off)."""

    @abstractmethod
    def encode_one(self, engine: Engine, source, max_source: int) -> EncoderOutput:
        """The encoder output of one source."""


def _register(kind: type[ModelKind]) -> type[ModelKind]:
    """Class decorator: makes `kind` the kind of its name and of its model class."""
    instance = kind()
    _BY_NAME[kind.name] = instance
    _BY_CLASS[kind.model_class] = instance
    return kind


@_register
class TranslatorKind(ModelKind):
    """The Transformer translator: sources are token ids (without `</s>`), cut to `max_source`."""

    name = "transformer"
    config_class = TransformerConfig
    model_class = Transformer

    def decode(self, engine, sources, options, max_source, batch, inference_type, attention=True):
        # input order, not grouped by length: rows of different lengths share a padded batch
        return translate_batches(
            engine, sources, options, max_source, batch, inference_type, False, attention
        )

    def encode_one(self, engine, source, max_source):
        return engine.encode(*source_batch([source], max_source))


@_register
class CaptionerKind(ModelKind):
    """The "Show, Attend and Tell" captioner: sources are uint8 RGB images (H, W, 3); there is
    no source length to cut to."""

    name = "captioner"
    config_class = CaptionerConfig
    model_class = Captioner

    def decode(self, engine, sources, options, max_source, batch, inference_type, attention=True):
        return caption_batches(engine, sources, options, batch, inference_type, attention)

    def encode_one(self, engine, source, max_source):
        return engine.encode(pixels(np.asarray(source)[None]))


def model_kind(model: nn.Module) -> ModelKind:
    """The kind of `model`: that of its class, or of the nearest base class registered;
    ValueError where there is none."""
    for cls in type(model).__mro__:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    raise ValueError(f"{type(model).__name__}: not a model of any kind ({kind_names()})")


def kind_named(name: str) -> ModelKind:
    """The kind of that name; ValueError for an unknown one."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown model kind {name!r} (kinds: {kind_names()})")
    return _BY_NAME[name]


def kind_names() -> list[str]:
    return sorted(_BY_NAME)
