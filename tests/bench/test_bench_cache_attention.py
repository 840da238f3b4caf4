"""bench.cache_attention: the in-place op it times computes what the served op computes."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort

from bench import cache_attention


def test_the_bench_checks_and_times_both_ops(capsys):
    argv = [
        "--batches",
        "1,3",
        "--pasts",
        "5",
        "--capacity",
        "8",
        "--heads",
        "2",
        "--head-dim",
        "8",
        "--calls",
        "3",
        "--json",
    ]
    assert cache_attention.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["batch"], r["past"]) for r in rows] == [(1, 5), (3, 5)]
    for r in rows:
        assert r["max_abs_error"] < 1e-5 and r["written_key_error"] == 0.0
        assert r["growing_us"] > 0 and r["in_place_us"] > 0


def test_rows_of_different_lengths_attend_only_their_own_past():
    """What a slot cache needs: each row writes at its own length and reads only up to it."""
    heads, dim, capacity = 2, 8, 8
    growing = cache_attention._session(cache_attention.growing_attention(heads, dim))
    in_place = cache_attention._session(cache_attention.in_place_attention(heads, dim, capacity))
    rng = np.random.default_rng(0)
    lengths = [2, 5, 0]
    q, k, v = (rng.standard_normal((3, 1, heads * dim), np.float32) for _ in range(3))
    buffers = rng.standard_normal((2, 3, heads, capacity, dim)).astype(np.float32)  # garbage
    key, value = (ort.OrtValue.ortvalue_from_numpy(b.copy()) for b in buffers)
    binding = in_place.io_binding()
    feeds = {
        "q": q,
        "k": k,
        "v": v,
        "seqlens_k": np.array(lengths, np.int32),
        "total": np.array(max(lengths) + 1, np.int32),
    }
    for name, array in feeds.items():
        binding.bind_cpu_input(name, array)
    binding.bind_ortvalue_input("past_key", key)
    binding.bind_ortvalue_input("past_value", value)
    binding.bind_ortvalue_output("present_key", key)
    binding.bind_ortvalue_output("present_value", value)
    binding.bind_output("out")
    in_place.run_with_iobinding(binding)
    out = binding.get_outputs()[2].numpy()
    for row, length in enumerate(lengths):
        past = {
            "past_key": buffers[0][row : row + 1, :, :length],
            "past_value": buffers[1][row : row + 1, :, :length],
        }
        alone, present, _ = growing.run(None, {
            "q": q[row : row + 1], "k": k[row : row + 1], "v": v[row : row + 1], **past,
            "mask": np.ones((1, length + 1), np.int32),
        })  # fmt: skip
        np.testing.assert_allclose(out[row], alone[0], atol=1e-5)
        np.testing.assert_array_equal(key.numpy()[row, :, length], present[0, :, length])
        beyond = buffers[0][row, :, length + 1 :]
        np.testing.assert_array_equal(key.numpy()[row, :, length + 1 :], beyond)  # untouched
