"""Model kinds: what a served model does at the edge, declared once per kind.

The runtime below the front (engine, continuous batch, scheduler, workers) knows no kind: it
follows the manifest's interface. What differs between kinds is only what a request holds and
what a response says, and each kind keeps that in one small module:

    transformer  service.runtime.translation  TranslationService: texts in, translations out
    captioner    service.runtime.captioning   CaptionService: images in, captions out

A kind's `ServedModel` turns a typed request (service.runtime.requests, parsed from the wire
by the front) into the engine's encoder inputs (tokenizing, decoding images), hypotheses into
a plain result (service.runtime.results), and a golden-set entry into encoder inputs (the
worker's start-up check). It knows no wire: the front's module of each service converts.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.runtime.controls import InputControls
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.errors import ModelRepositoryError
from service.runtime.graphs import SpecialTokens
from service.runtime.languages import Languages
from service.runtime.repository import ModelVersion
from service.runtime.results import Alignment, AttentionMaps, PartialText, TextHypothesis
from service.runtime.tokenizer import Tokenizer

MODULES = {"transformer": "service.runtime.translation", "captioner": "service.runtime.captioning"}


@dataclass
class Prepared:
    """A checked request, ready to decode."""

    encoder_inputs: dict[str, np.ndarray]  # Engine.encode's keyword arguments, batch = inputs
    options: DecodingOptions
    fields: list[str]  # the request field of each input, for messages
    keep_alignment: bool = False  # the attention rows of every hypothesis
    keep_log_probs: bool = False
    sources: Any = None  # what the kind needs again for the response (token ids, image sizes)
    keys: list[bytes] | None = None  # each input's identity for the response cache (None: none)
    controls: InputControls | None = None  # each input's step limit and forced start

    @property
    def inputs(self) -> int:
        return len(self.fields)

    def subset(self, indices: list[int]) -> Prepared:
        """The request narrowed to these inputs, for decoding (sources stay whole: the
        response is made of every input's hypotheses)."""
        return Prepared(
            {k: v[indices] for k, v in self.encoder_inputs.items()},
            self.options,
            [self.fields[i] for i in indices],
            self.keep_alignment,
            self.keep_log_probs,
            self.sources,
            None if self.keys is None else [self.keys[i] for i in indices],
            None if self.controls is None else self.controls.subset(indices),
        )


class ServedModel(ABC):
    """A model version as the front serves it."""

    kind: str  # the manifest's model kind
    # the full name of the service a front serves the kind under, set by the front's module
    # of that service (service.front.translate): the runtime knows no wire
    service: str
    tokenizer: Tokenizer  # of the output text

    def __init__(self, version: ModelVersion, config):
        self.version = version
        self.special_tokens = SpecialTokens.from_manifest(version.manifest["special_tokens"])
        limit = version.manifest["limits"]["max_output_tokens"]
        self.max_output_length = min(config.max_output_length or limit, limit)
        self.default_max_length = min(config.default_max_length, self.max_output_length)
        self.languages = Languages.from_manifest(version.manifest)

    @property
    def key(self) -> str:
        """The version as clients and logs name it: `<model>/<version>`."""
        return f"{self.version.name}/{self.version.version}"

    @property
    def worker_key(self) -> str:
        """What the workers hold this version's sessions under: its key and its manifest's
        revision, so that a version replaced in place is loaded beside the one it replaces
        (whose calls in flight finish on it) and fronts sharing workers never take one
        content for the other."""
        return f"{self.key}@{self.version.revision}"

    def hypothesis(
        self,
        h: Hypothesis,
        log_probs: bool,
        text: str | None = None,
        alignment: Alignment | None = None,
        attention: AttentionMaps | None = None,
    ) -> TextHypothesis:
        """The hypothesis as a client reads it: pieces, scores, log-probabilities when asked,
        and its `text` (its tokens decoded unless given: a text with protected items put back)."""
        return TextHypothesis(
            text=self.tokenizer.decode(h.tokens) if text is None else text,
            score=h.score,
            log_prob=h.log_prob,
            tokens=tuple(self.tokenizer.pieces(h.tokens)),
            finished=h.finished,
            token_log_probs=tuple(h.token_log_probs) if log_probs else (),
            alignment=alignment,
            attention=attention,
        )

    @abstractmethod
    async def prepare(self, request) -> Prepared:
        """The typed request (service.runtime.requests) ready to decode; InvalidArgument
        naming every bad input."""

    @abstractmethod
    def response(self, prepared: Prepared, results: list[list[Hypothesis]]):
        """The result (service.runtime.results) of a request's n-best hypotheses."""

    def partial_inputs(self, prepared: Prepared, results: list[list[Hypothesis]]) -> PartialText:
        """A stream's partial event once its first len(results) inputs are decoded, for a
        kind whose one streamed request can hold several inputs."""
        raise NotImplementedError(f"{self.kind} streams one input")

    @abstractmethod
    def partial(self, prepared: Prepared, tokens: list[int], steps: int) -> PartialText:
        """A stream's best hypothesis so far."""

    @staticmethod
    @abstractmethod
    def golden_inputs(version: ModelVersion, entry: dict) -> dict[str, np.ndarray]:
        """The encoder inputs of one golden-set entry."""

    @staticmethod
    def golden_controls(entry: dict, options: DecodingOptions) -> InputControls | None:
        """The per-input controls one golden-set entry was decoded under with `options` (a
        translator's length bound relative to its source), so that the start-up check
        decodes it as the certificate did."""
        return None


def kind_class(kind: str) -> type[ServedModel]:
    """The ServedModel class of a manifest's kind; ModelRepositoryError for an unknown one."""
    if kind not in MODULES:
        raise ModelRepositoryError(f"unknown model kind {kind!r} (served kinds: {sorted(MODULES)})")
    return importlib.import_module(MODULES[kind]).MODEL


def served_model(version: ModelVersion, config) -> ServedModel:
    """The version as its kind serves it; ModelRepositoryError where its manifest lacks what
    the kind reads (special tokens, limits, preprocessor, languages) or holds it in another
    shape."""
    served = kind_class(version.manifest["model"].get("kind"))
    try:
        return served(version, config)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise ModelRepositoryError(
            f"{version.directory}: a manifest this runtime cannot read as a {served.kind} "
            f"model's: {type(error).__name__}: {error}"
        ) from error
