"""Where caption requests' images are decoded: the cost that placement moves.

    python -m bench.images --json [--rounds N]

For images of the sizes clients send (the model's own 96 x 96 PNG up to a 1920 x 1080 photo
as JPEG and WebP) it measures, one thread, what the front does per image (check, decode,
convert, squeeze to the model's side, scale to float pixels) and what a worker pays to
receive the result (pickling the pixels as the pipe does), beside one decode step of the
captioner's batch at 1 and 16 rows (onnxruntime fp32, one thread). A worker that decoded
images itself would stall every row of its batch for the decode time; the front decodes on a
thread pool beside its event loop, and the worker receives (side x side) pixels only.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import statistics
import time
from pathlib import Path

import numpy as np

from service.runtime.captioning import pixels
from service.runtime.images import decode_image, resize_square

ROOT = Path(__file__).resolve().parents[1]
SIZES = {
    "png-96": ("PNG", (96, 96)),
    "jpeg-640x480": ("JPEG", (640, 480)),
    "webp-640x480": ("WEBP", (640, 480)),
    "jpeg-1920x1080": ("JPEG", (1920, 1080)),
}


def _image(fmt: str, size: tuple[int, int]) -> bytes:
    from PIL import Image

    scene = Image.open(ROOT / "examples" / "scene.png").convert("RGB")
    noise = np.random.default_rng(0).integers(0, 24, (size[1], size[0], 3), dtype=np.uint8)
    photo = np.asarray(scene.resize(size, Image.BICUBIC), dtype=np.uint8) + noise  # texture
    buffer = io.BytesIO()
    Image.fromarray(photo).save(buffer, fmt, **({"quality": 90} if fmt != "PNG" else {}))
    return buffer.getvalue()


def _median_ms(function, rounds: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _step_ms(rounds: int) -> dict:
    """One captioner decode step at 1 and 16 rows, when a served repository is there."""
    from service.runtime.onnx_engine import OnnxEngine
    from service.runtime.repository import verify

    version = ROOT / "data" / "repository" / "captioner" / "1"
    if not (version / "manifest.json").exists():
        return {}
    engine = OnnxEngine(verify(version))
    steps = {}
    for rows in (1, 16):
        random = np.random.default_rng(0).random((rows, 3, 96, 96), dtype=np.float32)
        encoder = engine.encode(pixels=random)
        state = engine.initial_state(encoder, rows)
        tokens = np.ones((rows, 1), dtype=np.int64)
        empty = np.zeros((rows, 1), dtype=np.int64)
        steps[f"step_{rows}_rows_ms"] = _median_ms(
            lambda e=encoder, s=state, t=tokens, m=empty: engine.step(t, m, m, s, e), rounds
        )
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.images", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = {"images": {}, **_step_ms(args.rounds)}
    for name, (fmt, size) in SIZES.items():
        data = _image(fmt, size)

        def prepare(data=data):
            return pixels([resize_square(decode_image(data, "image").pixels, 96)])

        prepared = prepare()
        report["images"][name] = {
            "encoded_kb": round(len(data) / 1024, 1),
            "prepare_ms": round(_median_ms(prepare, args.rounds), 3),
            "pickled_pixels_kb": round(len(pickle.dumps(prepared)) / 1024, 1),
            "pickle_ms": round(
                _median_ms(lambda p=prepared: pickle.loads(pickle.dumps(p)), args.rounds), 3
            ),
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, row in report["images"].items():
            print(name, row)
        print({k: round(v, 3) for k, v in report.items() if k != "images"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
