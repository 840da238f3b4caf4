"""`translate --json` and `caption --json` print one schema whichever engine decodes: the
dataclasses of attnserve/cli/results.py, checked field by field and type by type. The torch
engine decodes with the shipped checkpoints; the gRPC answers come from the stand-ins."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import fields, is_dataclass

import pytest
from helpers import ROOT
from stand_ins import CaptionStandIn, StandIn, started

from attnserve.cli import main
from attnserve.cli.results import Captions, Translations
from service.wire.v1 import caption_pb2_grpc, translation_pb2_grpc

SCENE = ROOT / "examples" / "scene.png"
DECODING = ["--beam-size", "2", "--n-best", "2", "--max-length", "20"]


def _problems(value, kind, where: str = "$") -> list[str]:
    """Where `value` (parsed JSON) departs from `kind`, a type of the results."""
    if is_dataclass(kind):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object"]
        names, hints = [f.name for f in fields(kind)], typing.get_type_hints(kind)
        if list(value) != names:
            return [f"{where}: keys {list(value)}, expected {names}"]
        return [p for n in names for p in _problems(value[n], hints[n], f"{where}.{n}")]
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is types.UnionType:  # X | None
        if value is None:
            return [] if type(None) in arguments else [f"{where}: null"]
        (inner,) = [a for a in arguments if a is not type(None)]
        return _problems(value, inner, where)
    if origin is tuple:  # tuple[X, ...]: a list of X
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        return [p for i, v in enumerate(value) for p in _problems(v, arguments[0], f"{where}[{i}]")]
    accepted = (int, float) if kind is float else kind
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, accepted):
        return [f"{where}: {value!r} is not {kind.__name__}"]
    return []


@pytest.fixture(scope="module")
def server() -> str:
    translator, captioner = StandIn(), CaptionStandIn()

    def register(grpc_server) -> None:
        translation_pb2_grpc.add_TranslationServiceServicer_to_server(translator, grpc_server)
        caption_pb2_grpc.add_CaptionServiceServicer_to_server(captioner, grpc_server)

    grpc_server, address = started(register)
    yield address
    grpc_server.stop(None)


def _printed(capsys, *argv: str) -> list[str]:
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def test_the_schema_check_finds_what_departs_from_the_results():
    counts = {"input_tokens": 1, "output_tokens": 1}
    response = {"model": "m", "version": "1", "translations": [], "token_counts": counts}
    assert _problems(response, Translations) == []
    assert _problems({**response, "version": 1}, Translations) == ["$.version: 1 is not str"]
    assert _problems({"model": "m"}, Translations)[0].startswith("$: keys ['model'], expected")
    captions = {"model": "m", "version": "", "captions": {}, "token_counts": counts}
    assert _problems(captions, Captions) == ["$.captions: dict, not a list"]
    bad_counts = {**response, "token_counts": {"input_tokens": True, "output_tokens": 1.5}}
    assert _problems(bad_counts, Translations) == [
        "$.token_counts.input_tokens: True is not int",
        "$.token_counts.output_tokens: 1.5 is not int",
    ]


def test_translate_prints_one_schema_over_grpc_and_torch(server, capsys):
    texts = ["Yo soy de Canadá.", "La casa es azul."]
    grpc = ["translate", "--server", server, *DECODING]
    torch = ["translate", "--engine", "torch", *DECODING]
    (line,) = _printed(capsys, *grpc, "--json", *texts)
    (local,) = _printed(capsys, *torch, "--json", *texts)
    *_, result = _printed(capsys, *grpc, "--json", "--stream", texts[0])
    for response in (json.loads(line), json.loads(local), json.loads(result)["result"]):
        assert _problems(response, Translations) == []
        for text, translation in zip(texts, response["translations"], strict=False):
            assert translation["source"] == text and len(translation["hypotheses"]) == 2
            best = translation["hypotheses"][0]
            rows = best["alignment"]["weights"]
            assert len(rows) == len(best["alignment"]["target_tokens"])
            assert len(rows) == len(best["token_log_probs"])
    assert len(json.loads(line)["translations"]) == len(json.loads(local)["translations"]) == 2
    for argv in (grpc, torch):  # and the same lines: RANK<TAB>SCORE<TAB>TEXT for two
        ranks = [row.split("\t")[0] for row in _printed(capsys, *argv, *texts)]
        assert ranks == ["1", "2", "1", "2"]


def test_caption_prints_one_schema_over_grpc_and_torch(server, capsys):
    grpc = ["caption", "--server", server, *DECODING, "--json"]
    (line,) = _printed(capsys, *grpc, str(SCENE))
    (local,) = _printed(capsys, "caption", "--engine", "torch", *DECODING, "--json", str(SCENE))
    *_, result = _printed(capsys, *grpc, "--stream", str(SCENE))
    sizes = set()
    for response in (json.loads(line), json.loads(local), json.loads(result)["result"]):
        assert _problems(response, Captions) == []
        (caption,) = response["captions"]
        assert caption["image"] == str(SCENE) and len(caption["hypotheses"]) == 2
        sizes.add((caption["image_width"], caption["image_height"]))
        best = caption["hypotheses"][0]
        maps = best["attention"]
        cells = maps["grid_height"] * maps["grid_width"]
        assert all(len(token["weights"]) == cells for token in maps["tokens"])
        assert len(maps["tokens"]) == len(best["tokens"]) + best["finished"]
    assert len(sizes) == 1  # the file's own size, read by the server and here alike
