"""The certificate of a model version exported from a Hugging Face directory, against the
model's own implementation in `transformers`:

tokenizer   the runtime's ids of every text equal the model's tokenizer's
graphs      each step's logits (fp32, teacher-forced over `generate`'s outputs, the cache
            carried as state) within the bound of our own translator's graphs of the model's
            forward pass (max |difference| within atol, or within rtol of the step's
            largest logit), or, for weights whose scale makes float32 itself err more, no
            further from the model's float64 logits than FLOAT_FACTOR x PyTorch's float32
greedy      whole decodes served in process (service.runtime.translation.translate_request:
            the served path, its languages and the model's rules) token-identical to
            `generate`'s, greedy and with the model's beam search (beam 4 by default, its
            length penalty, early stopping, forced and banned tokens)
rows        a row decoded alone equals the row decoded in a padded batch
int8        greedy int8 loses at most MAX_INT8_LOSS BLEU and chrF against fp32 (the bound of
            our own translator), on the references when given, else on `generate`'s own
            translations; certified on its own (`graphs.int8`): the version passes on its
            fp32 claims, and int8 is a certified variant only where its claim passed
fp16        where the version has fp16 graphs: the fp16 step's logits against the model's
            forward pass within our own translator's fp16 bound (or no further from float64
            than FLOAT_FACTOR x PyTorch's own float16), and greedy fp16 decodes
            served in process token-identical to `generate`'s but at near ties (within twice
            that step's error); on CUDA where onnxruntime has it, else on the CPU when the
            graphs are built op by op (export.certify.parity_devices' rule); certified on its
            own as int8 is (`graphs.fp16`), so that a CUDA server serves it by default

The golden set (export.certify.golden_set) is written as for our own models; the worker
checks it at start-up.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from export.certify import golden_set, parity_devices
from export.comparison import TOLERANCES
from export.decode_parity import corpus_scores
from export.hf.version import LANGUAGE_TOKENS, language_id, load
from export.translator_parity import MAX_INT8_LOSS
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import InvalidArgument
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.onnx_runtime import numpy_type, providers
from service.runtime.repository import GOLDEN, ModelVersion, verify, write_manifest
from service.runtime.requests import TranslateRequest
from service.runtime.translation import TranslationModel, translate_request

MIN_TEXTS = 200
BEAM = 4
GRAPH_BOUND = TOLERANCES["transformer", "fp32"]  # our own translator's
HALF_BOUND = TOLERANCES["transformer", "fp16"]
FLOAT_FACTOR = 4  # onnxruntime's error at most this x PyTorch's own, in one float type
GRAPH_TEXTS = 8
ROW_TEXTS = 16
GOLDEN_TEXTS = 4
BATCH = 16


@dataclass(frozen=True)
class Limits:
    """What a served model needs of a server's configuration, at the model's own limits (the
    certificate decodes as far as `generate` does)."""

    max_output_length: int = 0
    default_max_length: int = 10**6
    max_input_tokens: int = 0
    max_text_chars: int = 10**6


def served(model_version: ModelVersion, variant: str = "fp32", device: str = "cpu"):
    """(the version as the runtime serves it, an engine of `variant` on `device`)."""
    engine = OnnxEngine(model_version, variant, device)
    return TranslationModel(model_version, Limits()), engine


def generated(model, tokenizer, texts, languages, options: DecodingOptions) -> list[list[int]]:
    """`generate`'s tokens of every text (after the decoder's start, before `</s>`), in
    batches of BATCH, as the model ships its rules; `options`' beam size and length."""
    source, target = languages
    forced = {}
    if model.config.model_type in LANGUAGE_TOKENS:  # the languages by their tokens
        tokenizer.src_lang = source
        forced = {"forced_bos_token_id": language_id(tokenizer, target)}
    outputs = []
    for start in range(0, len(texts), BATCH):
        batch = tokenizer(texts[start : start + BATCH], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **batch, num_beams=options.beam_size, do_sample=False,
                max_length=options.max_length + 1, length_penalty=options.length_penalty,
                **forced,
            )  # fmt: skip
        outputs += [_content(row[1:].tolist(), model.config) for row in out]
    return outputs


def _content(tokens: list[int], config) -> list[int]:
    """Tokens up to `</s>` (padding after it)."""
    eos = config.eos_token_id
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def ours(
    model_version, variant, texts, languages, options, batch=BATCH, device="cpu"
) -> list[list[int]]:
    """The served tokens of every text (a text one input, not split), in batches."""
    model, engine = served(model_version, variant, device)
    request = TranslateRequest(
        texts=tuple(texts), fields=tuple(f"texts[{i}]" for i in range(len(texts))),
        options=options, splitting="none", source_language=languages[0],
        target_language=languages[1],
    )  # fmt: skip
    result = translate_request(model, engine, request, batch)
    eos = engine.special_tokens.eos
    return [_ids(model, t.hypotheses[0].tokens, eos) for t in result.translations]


def _ids(model: TranslationModel, pieces, eos: int) -> list[int]:
    vocabulary = model.tokenizer.encoder
    ids = [vocabulary[p] for p in pieces]
    return ids[: ids.index(eos)] if eos in ids else ids


def as_given(runtime: TranslationModel, texts, languages) -> list[str]:
    """The texts as the model's own tokenizer is given them: a multilingual Marian's with
    the target's `>>xx<<` before each (the token the served path puts before the source);
    M2M100's tokenizer adds its language token itself (`src_lang`)."""
    if runtime.language_tokens.target_token != "source":
        return list(texts)
    code = "".join(runtime.tokenizer.pieces(runtime.language_tokens.source_prefix(*languages)))
    return [f"{code} {text}" for text in texts]


def tokenizer_claim(model_version, tokenizer, texts, given, languages) -> dict:
    """The runtime's source ids of every text against the model's tokenizer's of the text
    as it is given it (`given`: as_given)."""
    model, _ = served(model_version)
    lead = model.language_tokens.source_prefix(*languages)
    eos = model.special_tokens.eos
    if hasattr(tokenizer, "src_lang"):
        tokenizer.src_lang = languages[0]
    same = sum(
        lead + model.tokenizer.encode(text) + [eos] == tokenizer(theirs)["input_ids"]
        for text, theirs in zip(texts, given, strict=True)
    )
    return {"texts": len(texts), "identical": same, "passed": same == len(texts)}


def forward_passes(model, tokenizer, texts, decodes, languages) -> list[tuple]:
    """Each text teacher-forced over its decode (`generate`'s tokens) through the model: (its
    tokenizer's ids, the decoder's ids, float32 logits, float64 logits), for the graph claims
    of every variant."""
    if hasattr(tokenizer, "src_lang"):
        tokenizer.src_lang = languages[0]
    exact, start, passes = copy.deepcopy(model).double(), model.config.decoder_start_token_id, []
    for text, tokens in zip(texts, decodes, strict=True):
        ids = tokenizer([text], return_tensors="pt")
        decoder_ids = torch.tensor([[start, *tokens]])
        with torch.no_grad():
            expected = model(**ids, decoder_input_ids=decoder_ids).logits[0].numpy()
            precise = exact(**ids, decoder_input_ids=decoder_ids).logits[0].numpy()
        passes.append((ids, decoder_ids, expected, precise))
    return passes


def graph_claim(model_version, model, passes, variant="fp32", device="cpu") -> dict:
    """The `variant` step's logits on `device` over the forward passes (`forward_passes`:
    teacher forcing, one token a step, the cache as state) against the model's float32
    logits, within our own translator's bound of the variant, or, for weights whose scale
    makes the float type itself err more, no further from the model's float64 logits than
    FLOAT_FACTOR x PyTorch's own in that type; the banned tokens' -inf left out."""
    directory = model_version.directory
    encoder, step = (
        ort.InferenceSession(str(model_version.graph(variant, name)), providers=providers(device))
        for name in ("encoder", "decoder")
    )
    cache_type = numpy_type(next(i.type for i in step.get_inputs() if i.name.startswith("past")))
    config, worst, relative = model.config, 0.0, 0.0
    banned = model_version.manifest["generation"]["banned"]
    own = model if variant == "fp32" else copy.deepcopy(model).half()
    own_error = 0.0  # PyTorch's own error in the variant's float type, against float64
    ours_error = 0.0
    for ids, decoder_ids, expected, precise in passes:
        theirs = expected
        if own is not model:
            with torch.no_grad():
                theirs = own(**ids, decoder_input_ids=decoder_ids).logits[0].float().numpy()
        src = ids["input_ids"].numpy()
        memory = encoder.run(None, {"src_ids": src, "src_mask": np.ones_like(src)})
        names = [o.name for o in encoder.get_outputs()]
        cross = dict(zip(names, memory, strict=True))
        heads, layers = config.decoder_attention_heads, config.decoder_layers
        past = {
            f"past_key_values.{i}.{part}": np.zeros((1, heads, 0, config.d_model // heads),
                                                    cache_type)
            for i in range(layers) for part in ("key", "value")
        }  # fmt: skip
        for t in range(decoder_ids.shape[1]):
            feed = {
                "input_ids": decoder_ids[:, t : t + 1].numpy(),
                "positions": np.array([[t]]),
                "self_mask": np.ones((1, t + 1), np.int64),
                **past,
                **{f"encoder.{k[len('encoder.'):]}": v for k, v in cross.items()
                   if k.startswith("encoder.")},
                "memory_mask": cross["memory_mask"],
            }  # fmt: skip
            out = dict(zip([o.name for o in step.get_outputs()], step.run(None, feed), strict=True))
            past = {
                f"past_key_values.{i}.{part}": out[f"present.{i}.{part}"]
                for i in range(layers) for part in ("key", "value")
            }  # fmt: skip
            got, want = out["logits"][0].astype(np.float32), expected[t].copy()
            keep = np.ones(len(want), bool)
            keep[banned] = False
            difference = _error(got[keep], want[keep])
            worst = max(worst, difference)
            relative = max(relative, difference / float(np.abs(want[keep]).max()))
            own_error = max(own_error, _error(theirs[t][keep], precise[t][keep]))
            ours_error = max(ours_error, _error(got[keep], precise[t][keep]))
            if banned:
                assert np.isneginf(got[banned]).all(), f"{directory}: banned tokens not -inf"
    bound = GRAPH_BOUND if variant == "fp32" else HALF_BOUND
    within = worst <= bound.atol or relative <= bound.rtol
    # (PyTorch's own error in the float type bounds nothing where it overflowed)
    own_bound = max(bound.atol, FLOAT_FACTOR * own_error)
    as_precise = math.isfinite(own_error) and ours_error <= own_bound
    return {
        "texts": len(passes), "max_abs": worst, "max_rel": relative,
        "tolerance": {"atol": bound.atol, "rtol": bound.rtol},
        "float64": {"onnxruntime": ours_error, "pytorch": own_error, "factor": FLOAT_FACTOR},
        "device": device, "passed": within or as_precise,
    }  # fmt: skip


def _error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want|; infinite where either is not finite (a NaN fails every bound)."""
    difference = float(np.abs(got - want).max())
    return difference if math.isfinite(difference) else math.inf


def decode_claim(name: str, theirs: list[list[int]], mine: list[list[int]], ties=None) -> dict:
    """How many decodes are identical; those that differ where `ties` (index -> whether the
    decodes part at a near tie) says so are near ties, the others fail the claim."""
    differing = [i for i, (a, b) in enumerate(zip(theirs, mine, strict=True)) if a != b]
    tied = [i for i in differing if ties is not None and ties(i)]
    failed = [i for i in differing if i not in tied]
    return {
        "search": name, "decodes": len(theirs), "identical": len(theirs) - len(differing),
        "near_ties": tied, "differing": failed[:20], "passed": not failed,
    }  # fmt: skip


def parting_margin(model, tokenizer, text, theirs, mine, languages) -> float:
    """The model's logit margin between the two tokens where two greedy decodes part."""
    parting = next(
        (k for k, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b),
        min(len(theirs), len(mine)),
    )
    if parting >= min(len(theirs), len(mine)):  # one ends where the other goes on
        chosen = [model.config.eos_token_id if parting == len(d) else d[parting]
                  for d in (theirs, mine)]  # fmt: skip
    else:
        chosen = [theirs[parting], mine[parting]]
    if hasattr(tokenizer, "src_lang"):
        tokenizer.src_lang = languages[0]
    ids = tokenizer([text], return_tensors="pt")
    prefix = torch.tensor([[model.config.decoder_start_token_id, *theirs[:parting]]])
    with torch.no_grad():
        logits = model(**ids, decoder_input_ids=prefix).logits[0, -1]
    return float(abs(logits[chosen[0]] - logits[chosen[1]]))


def greedy_ties(model, tokenizer, texts, theirs, mine, languages, window: float):
    """index -> whether greedy decodes i part where the model's margin is within `window`
    (twice the step's certified error: within it, either token may win)."""

    def tie(i: int) -> bool:
        margin = parting_margin(model, tokenizer, texts[i], theirs[i], mine[i], languages)
        return margin <= window

    return tie


def int8_claim(model_version, tokenizer_model, texts, languages, options, fp32, references):
    """int8's greedy BLEU and chrF loss against fp32's, on `references`."""
    int8 = ours(model_version, "int8", texts, languages, options)
    decode = tokenizer_model.tokenizer.decode
    base = corpus_scores([decode(t) for t in fp32], references)
    other = corpus_scores([decode(t) for t in int8], references)
    same = sum(a == b for a, b in zip(fp32, int8, strict=True))
    loss = {
        "bleu_loss": round(base["bleu"] - other["bleu"], 2),
        "chrf_loss": round(base["chrf"] - other["chrf"], 2),
        "identical_share": round(same / len(texts), 4),
    }
    loss["passed"] = loss["bleu_loss"] <= MAX_INT8_LOSS and loss["chrf_loss"] <= MAX_INT8_LOSS
    return loss


def half_claim(model_version, model, tokenizer, passes, texts, given, theirs, languages, options):
    """fp16's own claim: its step's logits over `passes` (graph_claim) and its greedy decodes
    against `generate`'s (`theirs`), near ties within twice that step's error, on the device
    export.certify.parity_devices names -> (the claim, the decodes; None where no device
    can certify it: traced graphs where no GPU is)."""
    device = parity_devices(model_version).get("fp16")
    if device is None:
        return {"passed": False, "device": None, "why": "traced fp16 graphs need a GPU"}, None
    graphs = graph_claim(model_version, model, passes, "fp16", device)
    window = 2 * graphs["max_abs"]
    half = ours(model_version, "fp16", texts, languages, options, device=device)
    ties = greedy_ties(model, tokenizer, given, theirs, half, languages, window)
    greedy = decode_claim("greedy", theirs, half, ties)
    passed = graphs["passed"] and greedy["passed"]
    return {**graphs, "near_tie": window, "greedy": greedy, "passed": passed}, half


def golden_texts(texts: list[str], theirs: list[list[int]], *decodes) -> list[str]:
    """GOLDEN_TEXTS of `texts` for the golden set: the first whose every one of `decodes`
    (a variant's greedy tokens, None where not made) is `generate`'s, so that a variant
    checked against fp32's golden tokens (fp16, at GOLDEN_AGREEMENT) meets no near tie
    there; the first texts where too few are."""
    made = [d for d in decodes if d is not None]
    clear = [t for i, t in enumerate(texts) if all(d[i] == theirs[i] for d in made)]
    return (clear if len(clear) >= GOLDEN_TEXTS else texts)[:GOLDEN_TEXTS]


def certify_hf(
    model_version: ModelVersion,
    directory: Path,
    texts: list[str],
    languages: tuple[str, str] = ("", ""),
    references: list[str] | None = None,
    beam: int = BEAM,
) -> dict:
    """Every claim above on `texts` (at least MIN_TEXTS), the golden set written, the
    certificate in the manifest; returns it."""
    if len(texts) < MIN_TEXTS:
        raise ValueError(f"the certificate needs at least {MIN_TEXTS} texts, got {len(texts)}")
    begun = time.perf_counter()
    texts = [t.strip() for t in texts]  # as the server reads them: their ends stripped
    model, tokenizer = load(directory)
    runtime, _ = served(model_version)
    try:  # refused as the export's other refusals are, not as a request is
        languages = runtime.resolve_languages(*languages, texts)
    except InvalidArgument as refused:
        raise ValueError(f"the languages to certify: {refused}") from None
    rules = model_version.manifest["generation"]
    limit = min(rules["max_length"] - 1, runtime.max_output_length)
    greedy = DecodingOptions(max_length=limit, max_length_ratio=0.0)
    beamed = DecodingOptions(
        beam_size=beam, max_length=limit, max_length_ratio=0.0,
        length_penalty=rules["length_penalty"],
    )  # fmt: skip
    given = as_given(runtime, texts, languages)  # what the model's own tokenizer reads
    theirs = generated(model, tokenizer, given, languages, greedy)
    fp32 = ours(model_version, "fp32", texts, languages, greedy)
    passes = forward_passes(model, tokenizer, given[:GRAPH_TEXTS], theirs[:GRAPH_TEXTS], languages)
    graphs = graph_claim(model_version, model, passes)
    window = 2 * graphs["max_abs"]
    ties = greedy_ties(model, tokenizer, given, theirs, fp32, languages, window)
    certificate = {
        "tokenizer": tokenizer_claim(model_version, tokenizer, texts, given, languages),
        "graphs": {"fp32": graphs},
        "near_tie": window,
        "decodes": [
            decode_claim("greedy", theirs, fp32, ties),
            decode_claim(f"beam {beam}", generated(model, tokenizer, given, languages, beamed),
                         ours(model_version, "fp32", texts, languages, beamed)),
        ],
        "rows": decode_claim(
            "greedy, one row a batch", fp32[:ROW_TEXTS],
            ours(model_version, "fp32", texts[:ROW_TEXTS], languages, greedy, batch=1),
        ),
    }  # fmt: skip
    if "int8" in model_version.manifest["graphs"]:
        against = "given" if references is not None else "generate's translations"
        if references is None:
            references = [runtime.tokenizer.decode(t) for t in theirs]
        certificate["int8_vs_fp32"] = {
            **int8_claim(model_version, runtime, texts, languages, greedy, fp32, references),
            "references": against,
        }
        # int8 is certified on its own: a certified variant only where this passed
        certificate["graphs"]["int8"] = {"passed": certificate["int8_vs_fp32"]["passed"]}
    half = None
    if "fp16" in model_version.manifest["graphs"]:  # on its own too
        certificate["graphs"]["fp16"], half = half_claim(
            model_version, model, tokenizer, passes, texts, given, theirs, languages, greedy
        )
    checks = [certificate["tokenizer"], certificate["graphs"]["fp32"], certificate["rows"]]
    checks += certificate["decodes"]
    certificate.update(
        texts=len(texts), languages=list(languages), max_int8_loss=MAX_INT8_LOSS,
        passed=all(c["passed"] for c in checks),
        seconds=round(time.perf_counter() - begun, 1),
    )  # fmt: skip
    sources = [
        runtime.language_tokens.source_ids(runtime.tokenizer.encode(t), *languages)
        for t in golden_texts(texts, theirs, fp32, half)
    ]
    golden = golden_set(model_version, sources)
    (model_version.directory / GOLDEN).write_text(json.dumps(golden) + "\n")
    kept = {k: v for k, v in model_version.manifest.items() if k not in ("files", "format_version")}
    write_manifest(model_version.directory, {**kept, "parity": certificate})
    verify(model_version.directory)
    return certificate
