"""The search beside the step: the numpy reference (service.runtime.search), the search graphs
(export.ops) on the CPU execution provider against it, and whole decodes with the search on
the device equal to decodes with it on the host."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from export.ops import sample_graph, search_graph
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.search import SearchRequest, host_search, log_softmax, top_k
from service.runtime.translation import translate_ids


def _tied(rows: int, vocab: int, seed: int) -> np.ndarray:
    """Logits with many equal values (small integers), the case where orders can differ."""
    return np.random.default_rng(seed).integers(-4, 4, size=(rows, vocab)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 2, 3, 7, 16, 50])
def test_top_k_orders_equal_values_by_index(k):
    values = _tied(9, 50, k)
    expected = np.argsort(-values, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(top_k(values, k), expected)


def test_host_search_gives_the_best_k_and_their_log_probs():
    logits = np.random.default_rng(0).normal(size=(5, 40)).astype(np.float32)
    candidates = host_search(logits, SearchRequest(k=6))
    log_probs = log_softmax(logits)
    assert candidates.ids.shape == (5, 6) and candidates.scores is None
    np.testing.assert_array_equal(candidates.ids[:, 0], logits.argmax(1))
    np.testing.assert_allclose(candidates.log_probs, np.sort(log_probs, 1)[:, ::-1][:, :6])
    banned = host_search(logits, SearchRequest(k=40, banned=(int(logits[0].argmax()),)))
    assert banned.ids[0, 0] != logits[0].argmax() and np.isneginf(banned.log_probs[0, -1])


def _session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("k", [1, 8, 64])
def test_search_graph_equals_the_host_search(dtype, k):
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    rng = np.random.default_rng(k)
    logits = np.concatenate([_tied(6, 64, k), rng.normal(size=(6, 64)) * 3]).astype(dtype)
    bias = np.zeros((1, 64), np.float32)
    bias[0, 5] = -np.inf
    request = SearchRequest(k=k, banned=(5,))
    expected = host_search(logits.astype(np.float32), request)
    feeds = {"logits": logits, "bias": bias, "k": np.array([k])}
    ids, log_probs = _session(search_graph(onnx_type)).run(None, feeds)
    np.testing.assert_array_equal(ids, expected.ids)
    np.testing.assert_allclose(log_probs, expected.log_probs, rtol=0, atol=1e-5)
    assert not (ids == 5).any() or k == 64

    temperature = np.linspace(0.5, 3.0, len(logits), dtype=np.float32)
    sampled = host_search(logits.astype(np.float32), SearchRequest(k, temperature, banned=(5,)))
    feeds["temperature"] = temperature[:, None]
    ids, log_probs, scores = _session(sample_graph(onnx_type)).run(None, feeds)
    np.testing.assert_array_equal(ids, sampled.ids)
    np.testing.assert_allclose(log_probs, sampled.log_probs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(scores, sampled.scores, rtol=0, atol=1e-5)


OPTIONS = {
    "greedy": DecodingOptions(max_length=64),
    "beam 4, 3-best": DecodingOptions(beam_size=4, num_hypotheses=3, max_length=64),
    "sampling, seed": DecodingOptions(temperature=0.8, top_p=0.9, num_hypotheses=2, seed=5),
    "sampling top-k": DecodingOptions(temperature=1.2, top_k=20, seed=11, max_length=64),
}


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("io_binding", [False, True])
def test_device_search_decodes_like_the_host_search(
    exported_translator, test_sentences, name, io_binding
):
    from service.runtime.tokenizer import Tokenizer

    version = exported_translator[0]
    sources = Tokenizer(version.tokenizer_file).encode_batch(test_sentences[:24])
    host = OnnxEngine(version, "fp32", io_binding=io_binding, device_search=False)
    graph = OnnxEngine(version, "fp32", io_binding=io_binding, device_search=True)
    assert graph.device_search and not host.device_search
    expected = translate_ids(host, sources, OPTIONS[name], 512)
    actual = translate_ids(graph, sources, OPTIONS[name], 512)
    for e, a in zip(expected, actual, strict=True):
        assert [h.tokens for h in e] == [h.tokens for h in a]
        assert [h.score for h in e] == pytest.approx([h.score for h in a], abs=1e-4)
        for x, y in zip(e, a, strict=True):  # alignments still come when asked for
            np.testing.assert_allclose(x.alignment, y.alignment, atol=1e-6)
