"""The onnxruntime engine: a model version's encoder and decoder-step graphs.

One compute thread per session is the fastest setting on small CPUs (see docs/benchmarks.md);
a server scales by running more workers, not more threads per worker.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from service.graphs import check_inputs, decoder_spec, encoder_spec
from service.inference import EncoderOutput, KeyValues
from service.repository import ModelVersion

PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}


def session_options(threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def _pairs(arrays: list[np.ndarray]) -> KeyValues:
    return [(arrays[i], arrays[i + 1]) for i in range(0, len(arrays), 2)]


class OnnxEngine:
    """Runs one variant ("fp32", "int8", "fp16") of a model version on one device."""

    def __init__(
        self, model: ModelVersion, variant: str = "fp32", device: str = "cpu", threads: int = 1
    ):
        if device not in PROVIDERS:
            raise ValueError(f"device must be one of {sorted(PROVIDERS)}, got {device!r}")
        config = model.config
        self.layers, self.heads = config["decoder_layers"], config["n_heads"]
        self.head_dim = config["d_model"] // config["n_heads"]
        self.float_dtype = np.dtype(np.float16 if variant == "fp16" else np.float32)
        self.encoder_spec, self.decoder_spec = encoder_spec(self.layers), decoder_spec(self.layers)
        options, providers = session_options(threads), PROVIDERS[device]
        self.encoder = ort.InferenceSession(
            str(model.graph(variant, "encoder")), options, providers=providers
        )
        self.decoder = ort.InferenceSession(
            str(model.graph(variant, "decoder")), options, providers=providers
        )
        self.variant, self.device = variant, device

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> EncoderOutput:
        feeds = {"src_ids": src_ids, "src_mask": src_mask}
        check_inputs(self.encoder_spec, feeds, self.float_dtype)
        outputs = self.encoder.run(None, feeds)
        return EncoderOutput(cross=_pairs(outputs[1:]), memory_mask=outputs[0])

    def empty_past(self, batch: int) -> KeyValues:
        empty = np.zeros((batch, self.heads, 0, self.head_dim), dtype=self.float_dtype)
        return [(empty, empty) for _ in range(self.layers)]

    def feeds(
        self, input_ids, positions, self_mask, past: KeyValues, encoder: EncoderOutput
    ) -> dict:
        feeds = {"input_ids": input_ids, "positions": positions, "self_mask": self_mask}
        for i, ((past_key, past_value), (key, value)) in enumerate(
            zip(past, encoder.cross, strict=True)
        ):
            feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = (
                past_key,
                past_value,
            )
            feeds[f"encoder.{i}.key"], feeds[f"encoder.{i}.value"] = key, value
        feeds["memory_mask"] = encoder.memory_mask
        return feeds

    def step(self, input_ids, positions, self_mask, past: KeyValues, encoder: EncoderOutput):
        feeds = self.feeds(input_ids, positions, self_mask, past, encoder)
        if past[0][0].shape[2] == 0:  # first step of a batch: check the whole interface once
            check_inputs(self.decoder_spec, feeds, self.float_dtype)
        outputs = self.decoder.run(None, feeds)
        logits, attention = outputs[0], outputs[-1]
        return (
            logits.astype(np.float32, copy=False),
            _pairs(outputs[1:-1]),
            attention.astype(np.float32, copy=False),
        )

    def take(self, tensor: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take(tensor, index, axis=0)
