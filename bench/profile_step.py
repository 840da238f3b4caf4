"""Where a decode's time goes, onnxruntime beside CTranslate2, on the same weights.

    python -m bench.profile_step --json [--batches 1,16] [--beams 1,4] [--length 64]
        [--variants fp32,int8] [--calls 4] [--seconds 4] [--repository BUILT_VERSION]
        [--workdir DIR] [--no-ct2] [--markdown FILE]

The shipped translator is exported as served (graphs built op by op, int8 per channel) and
converted to CTranslate2 (bench.ctranslate2_convert). Each case (variant, batch, beam)
decodes the first `batch` test sentences to exactly --length tokens (`</s>` suppressed), one
compute thread, each engine in a process of its own.

Ours: the server's engine (service.runtime.onnx_engine, every session with onnxruntime's
profiler on) decoded by service.runtime.decoding, as bench.decode runs it; a warm-up call,
then --calls calls profiled. Every kernel's time is put in a category by its operator (and
the output projection by its node), per decoding step; `onnxruntime` is the time inside the
step's runs that no kernel took (the session's own work: binding, allocation, dispatch),
`host` the time of a step outside every run (Python: the search's bookkeeping, the beams'
reorder of the cache, the feeds), `encoder` the encoder's whole run over the steps. The
profiler adds to every kernel and run (most at one row, where the kernels are short): the
same calls are timed again without it, in the same process.

CTranslate2 has no per-operator profiler in its Python package: its process is sampled by
`perf record` (cpu-clock, 2 kHz) while it decodes the same case for --seconds, warm-up and
loading excluded, and every sample is put in a category by the function it fell in (MKL's
int8 and float GEMM kernels, its own quantisation, softmax, layer norm, top k, copies);
shares of the whole call times the measured time a step. Its encoder falls in the same
categories (there is no encoder-only call to tell it apart). Without `perf`, or with
--no-ct2, CTranslate2 is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from bench import machine
from bench.decode import _setup
from bench.engines import stdout_to_stderr
from bench.lib.paths import TEST_SOURCES
from models.shipped import SHIPPED_TRANSLATOR

# onnxruntime operators by category, in the order of the report
CATEGORIES = {
    "int8 matmuls": (
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
        "MatMulInteger",
        "DynamicQuantizeLinear",
        "MatMulNBits",
        "QGemm",
    ),
    "fp32 matmuls": ("MatMul", "Gemm", "FusedMatMul", "FusedGemm"),
    "output projection": (),  # the MatMul over the vocabulary, by node
    "self-attention and cache": ("GroupQueryAttention",),
    "cross-attention": ("MultiHeadAttention", "Attention"),
    "layer norms": ("LayerNormalization", "SkipLayerNormalization"),
    "search": ("LogSoftmax", "TopK", "ReduceMax", "ArgMax"),
    "elementwise": ("Add", "Relu", "Mul", "Sub", "Div", "Cast", "Where"),
}
OTHER, ONNXRUNTIME, HOST, ENCODER = "other kernels", "onnxruntime", "host", "encoder"
# CTranslate2's functions (perf symbols, first match) by category
CT2_SYMBOLS = (
    ("int8 matmuls", r"s8u8s32|s8s8s32|_amx|quantize|gemm_s8"),
    ("fp32 matmuls", r"sgemm|sgemv|xsgemv|gemm_f32|gemv"),
    ("self-attention and cache", r"MultiHeadAttention|dot_product_attention|masked_fill"),
    ("layer norms", r"layer_norm|LayerNorm"),
    ("search", r"TopK|log_softmax|LogSoftMax|topk|sample|BestSampler|beam_search"),
    ("softmax", r"softmax|SoftMax"),
    ("copies", r"memmove|memcpy|memset|transpose|concat|gather|Concat|Gather|Split|copy"),
    ("elementwise", r"vml|add|mul|relu|gelu|Add|Mul|ReLU|bias"),
    ("allocation", r"malloc|free|_int_|Allocator|alloc"),
    ("host", r"python|Py|_PyEval|\[kernel|kallsyms"),
)
FULL = {"batches": [1, 16], "beams": [1, 4], "length": 64, "calls": 4, "seconds": 4.0}
QUICK = {"batches": [1, 2], "beams": [1, 2], "length": 8, "calls": 1, "seconds": 0.5}


def category(op: str, node: str, projection: str | None) -> str:
    """The category of an onnxruntime kernel (operator `op`, node `node`)."""
    if projection and node.startswith(projection):
        return "output projection"
    if node.startswith("search/") or "/search" in node:
        return "search"
    return next((name for name, ops in CATEGORIES.items() if op in ops), OTHER)


def ct2_category(symbol: str, library: str) -> str:
    """The category of a perf sample of the CTranslate2 process."""
    if "python" in library:
        return HOST
    for name, pattern in CT2_SYMBOLS:
        if re.search(pattern, symbol):
            return name
    return OTHER


def _runs(events: list[dict]) -> list[dict]:
    """onnxruntime profile events -> its runs, in order, each with its kernels' times."""
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"),
        key=lambda e: e["ts"],
    )
    kernels = sorted(
        (e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")),
        key=lambda e: e["ts"],
    )
    out, k = [], 0
    for run in runs:
        end, inside = run["ts"] + run["dur"], []
        while k < len(kernels) and kernels[k]["ts"] < run["ts"]:
            k += 1
        while k < len(kernels) and kernels[k]["ts"] <= end:
            event = kernels[k]
            inside.append(
                (event["args"]["op_name"], event["name"][: -len("_kernel_time")], event["dur"])
            )
            k += 1
        out.append({"us": run["dur"], "kernels": inside})
    return out


def output_projection(path: Path, vocab: int) -> str | None:
    """The name of the node that projects onto the vocabulary (a MatMul whose weight has
    `vocab` columns), which onnxruntime's fused nodes keep as their name's start."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    shapes = {i.name: list(i.dims) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in ("MatMul", "MatMulInteger", "MatMulNBits") and len(node.input) > 1:
            dims = shapes.get(node.input[1])
            if dims and (dims[-1] == vocab or (node.op_type == "MatMulNBits" and dims[0] == vocab)):
                return node.name
    return None


def _profile_ours(repository: str, variant: str, inputs: list, beam: int, length: int, calls: int):
    """In a worker process: the engine's sessions profiled over `calls` decodes after one."""
    import onnxruntime as ort

    import service.runtime.onnx_engine as onnx_engine
    from bench.engines import OurRunner
    from service.runtime.inference import CachedInference
    from service.runtime.onnx_runtime import session_options
    from service.runtime.repository import verify

    scratch = tempfile.mkdtemp(prefix="profile-step-")
    plain, graphs = onnx_engine.OnnxEngine._session_factory, {}  # graph path by session

    def profiled(self, threads: int, capture: bool = False):
        """The engine's sessions, each with the profiler on and a file of its own (a file
        is named by the millisecond its session starts)."""

        def session(path):
            options = session_options(threads, self.device)
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(scratch, f"session{len(graphs)}")
            made = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            graphs[made] = Path(path)
            return made

        return session

    onnx_engine.OnnxEngine._session_factory = profiled
    try:
        version = verify(Path(repository))
        engine = onnx_engine.OnnxEngine(version, variant, "cpu", 1)
    finally:
        onnx_engine.OnnxEngine._session_factory = plain
    runner = OurRunner(engine, CachedInference, version.config["max_length"])
    runner.time(inputs, None, beam, length)  # the warm-up: the first of each graph's runs
    samples = [runner.time(inputs, None, beam, length) for _ in range(calls)]
    # the same calls without the profiler, which adds to every kernel and run
    plain_runner = OurRunner(
        onnx_engine.OnnxEngine(version, variant, "cpu", 1), CachedInference, runner.max_source
    )
    plain_runner.time(inputs, None, beam, length)
    plain = [plain_runner.time(inputs, None, beam, length) for _ in range(calls)]
    sessions = {"encoder": engine.encoder, "decoder": engine.decoder}
    sessions |= {"lean": engine.lean_decoder, "one_row": engine.one_row_decoder}
    sessions |= {f"search.{k}": s for k, s in getattr(engine, "search_ops", {}).items()}
    sessions |= {f"op.{op}.{d}": s for op, by in engine.ops.items() for d, s in by.items()}
    vocab = int(version.config["vocab_size"])
    profiles = {}
    for name, session in sessions.items():
        if session is None:
            continue
        path = session.end_profiling()
        with open(path, encoding="utf-8") as f:
            runs = _runs(json.load(f))
        os.remove(path)
        graph = graphs[session]
        projection = None if name == "encoder" else output_projection(graph, vocab)
        profiles[name] = {"runs": runs, "projection": projection}
    shutil.rmtree(scratch, ignore_errors=True)
    return {"samples": samples, "plain": plain, "profiles": profiles}


def _summarise_ours(result: dict) -> dict:
    """Microseconds a decoding step by category, the encoder per call, the step's wall time."""
    samples = result["samples"]
    steps = sum(s["steps"] for s in samples)
    per_step: dict[str, float] = defaultdict(float)
    runs_inside = 0.0
    encoder_us = 0.0
    step_runs = defaultdict(int)
    for name, profile in result["profiles"].items():
        runs = profile["runs"]
        if name == "encoder":  # one run a call, the warm-up's first
            measured = runs[1:]
            encoder_us = sum(r["us"] for r in measured) / max(len(measured), 1)
            continue
        # the warm-up call is the first of every graph's runs: drop that share of them
        total_calls = len(samples) + 1
        kept = runs[len(runs) // total_calls :] if runs else []
        step_runs[name] = len(kept)
        for run in kept:
            runs_inside += run["us"]
            inside = 0.0
            for op, node, us in run["kernels"]:
                per_step[category(op, node, profile["projection"])] += us
                inside += us
            per_step[ONNXRUNTIME] += run["us"] - inside
    wall_us = 1e6 * sum(s["decode_s"] for s in samples)
    per_step[HOST] += wall_us - runs_inside
    encoder_s = sum(s["encoder_s"] for s in samples)
    per_step[ENCODER] = 1e6 * encoder_s
    table = {k: v / steps for k, v in per_step.items()}
    plain = result["plain"]
    unprofiled = sum(s["encoder_s"] + s["decode_s"] for s in plain) / sum(s["steps"] for s in plain)
    return {
        "us_per_step": table,
        "step_us": (wall_us + 1e6 * encoder_s) / steps,
        "unprofiled_step_us": 1e6 * unprofiled,
        "encoder_ms": encoder_us / 1000,
        "encoder_wall_ms": 1000 * encoder_s / len(samples),
        "steps_per_call": steps / len(samples),
        "runs_per_step": {k: v / steps for k, v in step_runs.items() if v},
        "call_ms": 1000 * sum(s["encoder_s"] + s["decode_s"] for s in samples) / len(samples),
    }


def _ct2_child(model: str, pieces: str, beam: int, length: int, seconds: float) -> None:
    """Runs in a process sampled by perf: loads, warms up, waits for a line on stdin, then
    decodes for `seconds` and prints the calls and their time."""
    import ctranslate2

    translator = ctranslate2.Translator(model, device="cpu", intra_threads=1, inter_threads=1)
    batch = json.loads(Path(pieces).read_text(encoding="utf-8"))

    def call():
        translator.translate_batch(
            batch, beam_size=beam, min_decoding_length=length, max_decoding_length=length
        )

    call()
    print("ready", flush=True)
    sys.stdin.readline()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        calls += 1
    print(json.dumps({"calls": calls, "seconds": time.perf_counter() - start}), flush=True)


def _perf_report(data: Path) -> list[tuple[float, str, str]]:
    """(share %, library, symbol) of every line of `perf report` over `data`."""
    text = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--sort", "dso,sym", "--percent-limit", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in text.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)", line)
        if match:
            rows.append((float(match[1]), match[2], match[3].strip()))
    return rows


def _profile_ct2(model: str, pieces: list, beam: int, length: int, seconds: float, scratch: Path):
    """CTranslate2 on one case under perf: microseconds a step by category, its top functions."""
    source = scratch / "pieces.json"
    source.write_text(json.dumps(pieces), encoding="utf-8")
    code = (
        "import sys; from bench.profile_step import _ct2_child; "
        f"_ct2_child({model!r}, {str(source)!r}, {beam}, {length}, {seconds})"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=machine.one_thread_environment(),
        cwd=Path(__file__).resolve().parents[1],
    )
    data = scratch / "perf.data"
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the CTranslate2 process did not start")
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-o", str(data)]
            + ["-p", str(child.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # perf attached
        child.stdin.write("go\n")
        child.stdin.flush()
        timing = json.loads(child.stdout.readline())
        child.wait(timeout=60)
        perf.wait(timeout=60)
    finally:
        child.kill()
    rows = _perf_report(data)
    step_us = 1e6 * timing["seconds"] / (timing["calls"] * length)
    shares: dict[str, float] = defaultdict(float)
    for share, library, symbol in rows:
        shares[ct2_category(symbol, library)] += share
    total = sum(shares.values()) or 1.0
    top = [
        {"share": share, "library": library, "symbol": symbol[:120]}
        for share, library, symbol in rows[:12]
    ]
    return {
        "us_per_step": {k: step_us * v / total for k, v in shares.items()},
        "step_us": step_us,
        "calls": timing["calls"],
        "top": top,
    }


def _arguments(argv):
    def listed(kind):
        return lambda text: [kind(item) for item in text.split(",")]

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small cases, one call each")
    parser.add_argument("--batches", type=listed(int))
    parser.add_argument("--beams", type=listed(int))
    parser.add_argument("--length", type=int, help="output tokens a row (default 64)")
    parser.add_argument("--variants", type=listed(str), default=["fp32", "int8"])
    parser.add_argument("--calls", type=int, help="profiled decodes a case (ours)")
    parser.add_argument("--seconds", type=float, help="sampled seconds a case (CTranslate2)")
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED_TRANSLATOR)
    parser.add_argument("--repository", type=Path, help="a built version exported from it")
    parser.add_argument("--sources", type=Path, default=TEST_SOURCES, help="one sentence a line")
    parser.add_argument("--workdir", type=Path, help="keep exports here (default: temporary)")
    parser.add_argument("--no-ct2", action="store_true", help="onnxruntime alone")
    parser.add_argument("--markdown", type=Path, help="write the tables as Markdown")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        setattr(args, key, value if getattr(args, key) is None else getattr(args, key))
    if set(args.variants) - {"fp32", "int8"}:
        parser.error("variants are fp32 and int8")
    return args


CT2_VARIANT = {"fp32": "float32", "int8": "int8"}


def _inputs(checkpoint: Path, sources: Path, batch: int) -> tuple[list, list]:
    """Token ids and pieces (no `</s>`) of the first `batch` sentences of `sources`."""
    from models.config import TransformerConfig
    from service.runtime.tokenizer import Tokenizer

    longest = TransformerConfig.load(checkpoint / "config.json").max_length - 1
    tokenizer = Tokenizer(checkpoint / "tokenizer.model")
    lines = [x for x in sources.read_text(encoding="utf-8").splitlines() if x.strip()]
    if len(lines) < batch:
        raise SystemExit(f"{sources}: {len(lines)} sentences, {batch} needed")
    ids = [s[:longest] for s in tokenizer.encode_batch(lines[:batch])]
    return ids, [tokenizer.pieces(s) for s in ids]


def markdown(report: dict) -> str:
    """One table a case: microseconds a step by category, ours beside CTranslate2."""
    lines = []
    for case in report["cases"]:
        engines = [e for e in ("ours", "ct2") if e in case]
        head = f"batch {case['batch']}, beam {case['beam']}, {case['variant']}"
        names = {"ours": "onnxruntime", "ct2": "CTranslate2 (perf)"}
        lines += ["", f"**{head}** (us a step)", ""]
        lines.append("| | " + " | ".join(names[e] for e in engines) + " |")
        lines.append("|---|" + "--:|" * len(engines))
        keys = [*CATEGORIES, "softmax", "copies", "allocation", OTHER, ONNXRUNTIME, HOST, ENCODER]
        for key in keys:
            values = [case[e]["us_per_step"].get(key) for e in engines]
            if any(v for v in values):
                cells = " | ".join(f"{v:.0f}" if v else "" for v in values)
                lines.append(f"| {key} | {cells} |")
        totals = " | ".join(f"**{case[e]['step_us']:.0f}**" for e in engines)
        lines.append(f"| whole call over its steps | {totals} |")
        if "ours" in case:
            plain = f"{case['ours']['unprofiled_step_us']:.0f}"
            cells = " | ".join([plain] + [f"{case[e]['step_us']:.0f}" for e in engines[1:]])
            lines.append(f"| the same, no profiler | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    os.environ.update(dict.fromkeys(machine.THREAD_VARIABLES, "1"))
    with_ct2 = not args.no_ct2 and shutil.which("perf") is not None
    ct2 = [CT2_VARIANT[v] for v in args.variants] if with_ct2 else []
    report = {"machine": machine.measure_in_subprocess(args.quick), "cases": []}
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        methods = [] if args.repository else ["built"]
        setup, weights = _setup(
            "translator", args.checkpoint, args.repository, workdir, ct2, methods
        )
        repository = setup["repositories"].get("built") or setup["repositories"]["traced"]
        context = get_context("spawn")
        for variant in args.variants:
            for batch in args.batches:
                ids, pieces = _inputs(args.checkpoint, args.sources, batch)
                for beam in args.beams:
                    print(f"{variant} batch {batch} beam {beam}", file=sys.stderr)
                    case = {"variant": variant, "batch": batch, "beam": beam, "length": args.length}
                    with ProcessPoolExecutor(1, context, stdout_to_stderr) as pool:
                        raw = pool.submit(
                            _profile_ours, repository, variant, ids, beam, args.length, args.calls
                        ).result()
                    case["ours"] = _summarise_ours(raw)
                    if with_ct2:
                        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                        model = setup["ct2"][CT2_VARIANT[variant]]
                        try:
                            case["ct2"] = _profile_ct2(
                                model, pieces, beam, args.length, args.seconds, scratch
                            )
                        except (RuntimeError, subprocess.SubprocessError, ValueError) as error:
                            report["ct2_error"] = str(error)  # perf could not sample here
                            with_ct2 = False
                    report["cases"].append(case)
    report["settings"] = {
        k: getattr(args, k) for k in ("batches", "beams", "length", "calls", "seconds", "variants")
    }
    report["settings"] |= {
        "checkpoint": str(args.checkpoint),
        "weights_sha256": weights,
        "ct2": with_ct2,
    }
    if args.markdown:
        args.markdown.write_text(markdown(report), encoding="utf-8")
    print(json.dumps(report, indent=2) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
