"""The `attnserve export` and `attnserve parity` subcommands."""

from __future__ import annotations

import json
import shutil
from argparse import Namespace
from pathlib import Path

from export import certify as certificates
from export.certify import INT8_CLAIMS, certify, run_suite
from export.decode_parity import ParityInputs
from export.kinds import export_kind
from export.repository import INT8_SCALES, publish, staging, write_version
from models.checkpoint import WEIGHTS, checkpoint_grammar, load_checkpoint
from service.runtime.errors import ModelRepositoryError
from service.runtime.repository import sha256, verify


def parity_inputs(model, data: Path, tokenizer, count: int) -> ParityInputs:
    """Test inputs, their references and how many come from each part, as the kind of `model`
    takes them from `data` (export.kinds). Translator: the first `count` sentences of every
    test part (the Bible test split; `modern` where the data has it; `everyday`, committed
    with the code). Captioner: `count` images spread evenly over its test parts, and its whole
    test split for the int8 claim."""
    return export_kind(model).parity_inputs(data, tokenizer, count)


def _summary(certificate: dict) -> dict:
    return {
        "passed": certificate["passed"],
        "sentences": certificate["sentences"],
        "parts": certificate.get("parts"),
        "graphs": {
            v: {"passed": g["passed"], "max_abs": g["max_abs"]}
            for v, g in certificate["graphs"].items()
        },
        "decodes": {
            d["setting"]: f"{d['identical']}/{d['sentences']} identical, "
            f"{len(d['near_ties'])} near-ties, {d['divergence_count']} divergences"
            for d in certificate["decodes"]
        },
        "attention": certificate.get("attention"),
        **{k: certificate[k] for k in INT8_CLAIMS if k in certificate},
        "seconds": certificate["seconds"],
    }


def export(args: Namespace) -> int:
    model, tokenizer = load_checkpoint(args.checkpoint)
    # the certificate's inputs first: too few of them refuse the export before it is written
    inputs = parity_inputs(model, args.data, tokenizer, args.sentences)
    least = certificates.MIN_SENTENCES  # read as the certificate reads it
    if len(inputs.sources) < least:
        raise ValueError(
            f"--sentences {args.sentences} gives {len(inputs.sources)} test inputs of "
            f"{args.data}; the parity certificate needs at least {least}"
        )
    source = {"checkpoint": str(args.checkpoint), "sha256": sha256(args.checkpoint / WEIGHTS)}
    directory = args.out / args.name / args.version
    model_version = write_version(
        model,
        tokenizer.model_file,
        staging(directory),  # published once certified
        args.name,
        args.version,
        tuple(args.variants.split(",")),
        source,
        args.graphs,
        getattr(args, "int8_scales", INT8_SCALES[0]),
        checkpoint_grammar(args.checkpoint, tokenizer),
    )
    certificate = certify(model_version, args.checkpoint, inputs)
    publish(model_version.directory, directory)
    print(json.dumps({"model_version": str(directory), **_summary(certificate)}, indent=2))
    return 0 if certificate["passed"] else 1


def parity(args: Namespace) -> int:
    model_version = verify(args.directory)
    source = model_version.manifest.get("source", {})
    checkpoint = Path(args.checkpoint or source.get("checkpoint", ""))
    if not (checkpoint / WEIGHTS).is_file():
        raise ModelRepositoryError(f"{args.directory}: source checkpoint {checkpoint} not found")
    if source.get("sha256") and sha256(checkpoint / WEIGHTS) != source["sha256"]:
        raise ModelRepositoryError(f"{checkpoint}: weights differ from those the graphs came from")
    model, tokenizer = load_checkpoint(checkpoint)
    data = args.data or Path("data") / export_kind(model).data
    inputs = parity_inputs(model, data, tokenizer, args.sentences)
    certificate = run_suite(model_version, checkpoint, inputs)
    output = certificate if args.json else _summary(certificate)
    print(json.dumps(output, indent=2 if not args.json else None))
    return 0 if certificate["passed"] else 1


SPANISH_TESTS = Path(__file__).resolve().parents[1] / "data" / "translator" / "test.es"


def certificate_texts(args: Namespace, version) -> tuple[list[str], list[str] | None]:
    """The texts the certificate decodes (`--texts`, else the Spanish test sentences), those
    within the model's length limit, `--sentences` of them, with their `--references`."""
    from service.runtime.hf_tokenizers import read_tokenizer

    if args.texts:
        texts = args.texts.read_text(encoding="utf-8").splitlines()
    else:
        texts = (SPANISH_TESTS).read_text(encoding="utf-8").splitlines()
    references = None
    if args.references:
        references = args.references.read_text(encoding="utf-8").splitlines()
        if len(references) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(references)} references")
    tokenizer = read_tokenizer(version)
    limit = version.manifest["limits"]["max_source_tokens"] - 2  # a language token, `</s>`
    kept = [i for i, t in enumerate(texts) if t.strip() and len(tokenizer.encode(t)) <= limit]
    kept = kept[: args.sentences]
    return [texts[i] for i in kept], None if references is None else [references[i] for i in kept]


def export_hf(args: Namespace) -> int:
    """`attnserve export hf DIR`: the version written and certified against transformers."""
    from export.hf.certify import MIN_TEXTS, certify_hf
    from export.hf.version import export_hf as write_hf

    if args.sentences < MIN_TEXTS:  # refused before the version is written
        raise ValueError(
            f"--sentences {args.sentences}: the certificate needs at least {MIN_TEXTS}"
        )
    given = None
    if args.source_language or args.target_language:
        given = ([args.source_language] * bool(args.source_language),
                 [args.target_language] * bool(args.target_language))  # fmt: skip
    # fp16 graphs are made where they can be certified: on a GPU, or on the CPU when built
    # op by op (export.certify.parity_devices)
    half = _cuda() or args.graphs == "built"
    variants = tuple(v for v in args.variants.split(",") if v != "fp16" or half)
    declared = (_codes(args.reads), _codes(args.writes))
    directory = args.out / args.name / args.version
    into = staging(directory)  # published once certified
    version = write_hf(
        args.directory, args.out, args.name, args.version, variants, given, declared, into,
        args.graphs, args.int8_scales,
    )  # fmt: skip
    try:
        texts, references = certificate_texts(args, version)
        languages = (args.source_language, args.target_language)
        certificate = certify_hf(version, args.directory, texts, languages, references)
    except BaseException:  # a refusal or an interruption: no staged version left behind
        shutil.rmtree(into, ignore_errors=True)
        raise
    publish(version.directory, directory)
    summary = {
        "model_version": str(directory),
        "passed": certificate["passed"],
        "tokenizer": certificate["tokenizer"],
        "graphs": certificate["graphs"],
        "decodes": {
            d["search"]: f"{d['identical']}/{d['decodes']} identical to generate, "
            f"{len(d['near_ties'])} near ties"
            for d in certificate["decodes"]
        },
        "rows": certificate["rows"]["passed"],
        "int8_vs_fp32": certificate.get("int8_vs_fp32"),
        "seconds": certificate["seconds"],
    }
    print(json.dumps(summary, indent=2))
    return 0 if certificate["passed"] else 1


def _codes(listed: str | None) -> list[str]:
    """Language codes given as a comma-separated list."""
    return [code.strip() for code in (listed or "").split(",") if code.strip()]


def _cuda() -> bool:
    """Whether onnxruntime has a GPU here (traced fp16 graphs are certified on one)."""
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()
