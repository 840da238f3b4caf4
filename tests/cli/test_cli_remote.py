"""The gRPC side of the client commands (`attnserve.cli.remote`): the channel and its bearer
token, a failed call as one line, the request's decoding options, streams shown as they grow,
and responses read into `results` with their counts and shapes checked."""

from __future__ import annotations

import argparse
import io
import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import ROOT
from stand_ins import started, translation_started

from attnserve.cli import remote
from attnserve.cli.main import build_parser
from attnserve.cli.results import Alignment, Translations
from attnserve.cli.subcommand import Failure
from service.wire.v1 import caption_pb2, decoding_pb2, translation_pb2, translation_pb2_grpc


class RecordingHealth(health_pb2_grpc.HealthServicer):
    """SERVING to every call; keeps each call's metadata. The service "refuse" is refused."""

    def __init__(self) -> None:
        self.metadata: list[dict] = []

    def Check(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        if request.service == "refuse":
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not for you")
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


@pytest.fixture(scope="module")
def recording_server():
    servicer = RecordingHealth()
    server, address = started(lambda s: health_pb2_grpc.add_HealthServicer_to_server(servicer, s))
    yield servicer, address
    server.stop(None)


@pytest.fixture
def recording(recording_server):
    servicer, address = recording_server
    servicer.metadata.clear()
    return servicer, address


def _connection(address: str, token_file: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        server=address, tls=False, tls_ca=None, tls_cert=None, tls_key=None, token_file=token_file
    )


def _check(service: str = ""):
    def command(channel, args) -> int:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
        return 7

    return command


def test_client_call_returns_the_commands_status_and_sends_the_token_file(recording, tmp_path):
    servicer, address = recording
    token = tmp_path / "token"
    token.write_text("  s3cret\n", encoding="utf-8")
    assert remote.client_call(_check(), _connection(address, token)) == 7
    assert remote.client_call(_check(), _connection(address)) == 7
    with_token, without = servicer.metadata
    assert with_token["authorization"] == "Bearer s3cret"  # the file's text, stripped
    assert "authorization" not in without


def test_the_token_file_wins_over_the_environment(recording, tmp_path, monkeypatch):
    servicer, address = recording
    monkeypatch.setenv("ATTNSERVE_TOKEN", "from-env")
    token = tmp_path / "token"
    token.write_text("from-file", encoding="utf-8")
    remote.client_call(_check(), _connection(address, token))
    remote.client_call(_check(), _connection(address))
    assert [m["authorization"] for m in servicer.metadata] == [
        "Bearer from-file",
        "Bearer from-env",
    ]


def test_a_token_file_saved_with_a_byte_order_mark_sends_the_token(recording, tmp_path):
    servicer, address = recording
    token = tmp_path / "token"
    token.write_bytes("\ufeffs3cret\r\n".encode())
    assert remote.client_call(_check(), _connection(address, token)) == 7
    assert servicer.metadata[-1]["authorization"] == "Bearer s3cret"


def test_an_unreadable_token_file_is_a_failure_before_any_call(recording, tmp_path):
    servicer, address = recording
    with pytest.raises(Failure, match=r"^--token-file: .*No such file"):
        remote.client_call(_check(), _connection(address, tmp_path / "none"))
    assert servicer.metadata == []


@pytest.mark.parametrize(
    ("held", "refusal"),
    [
        (b"s3cr\xe9t", "not UTF-8 ('utf-8' codec can't decode byte 0xe9 in position 4"),
        ("s3crét".encode(), "a token is printable ASCII; this one holds other characters"),
        (b"s3c\tret", "a token is printable ASCII; this one holds other characters"),
    ],
)
def test_a_token_a_header_cannot_carry_is_a_failure_naming_its_file(
    recording, tmp_path, held, refusal
):
    """Not "TLS: ..." for a token file that is not UTF-8, nor every call INTERNAL "Invalid
    metadata" for a token gRPC cannot send: the file named, before any call."""
    servicer, address = recording
    token = tmp_path / "token"
    token.write_bytes(held)
    with pytest.raises(Failure, match=f"^--token-file {token}: " + re.escape(refusal)):
        remote.client_call(_check(), _connection(address, token))
    assert servicer.metadata == []


def test_a_token_of_the_environment_a_header_cannot_carry_is_a_failure(recording, monkeypatch):
    servicer, address = recording
    monkeypatch.setenv("ATTNSERVE_TOKEN", "s3crét")
    with pytest.raises(Failure, match=r"^\$ATTNSERVE_TOKEN: a token is printable ASCII"):
        remote.client_call(_check(), _connection(address))
    assert servicer.metadata == []


@pytest.mark.parametrize("flag", ["tls_ca", "tls_cert", "tls_key"])
def test_a_tls_file_that_is_not_pem_is_a_failure_naming_it(flag, recording, tmp_path):
    """Not every call UNAVAILABLE, "Failed to create security handshaker", naming no file."""
    servicer, address = recording
    pem, other = tmp_path / "good.pem", tmp_path / "README.md"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    other.write_text("# not a certificate\n")
    args = _connection(address)
    args.tls_ca = args.tls_cert = args.tls_key = pem
    setattr(args, flag, other)
    option = "--" + flag.replace("_", "-")
    with pytest.raises(Failure, match=f"^TLS: {option} {other}: not PEM \\(no -----BEGIN line\\)$"):
        remote.client_call(_check(), args)
    assert servicer.metadata == []
    setattr(args, flag, pem)
    remote._check_pem(args)  # PEM blocks: on to gRPC, which reads what they hold


def test_an_empty_token_file_is_a_failure_not_a_call_without_a_token(
    recording, tmp_path, monkeypatch
):
    """A secret mounted empty: the call would go with no token (the file's "" over
    $ATTNSERVE_TOKEN) and come back UNAUTHENTICATED, "no bearer token", naming no file."""
    servicer, address = recording
    monkeypatch.setenv("ATTNSERVE_TOKEN", "from-env")
    token = tmp_path / "token"
    token.write_text(" \n", encoding="utf-8")
    with pytest.raises(Failure, match=f"^--token-file: {token} holds no token$"):
        remote.client_call(_check(), _connection(address, token))
    assert servicer.metadata == []


def test_a_failed_call_is_its_status_on_stderr_and_exit_status_1(recording, capsys):
    _, address = recording
    assert remote.client_call(_check("refuse"), _connection(address)) == 1
    assert capsys.readouterr().err == "error: PERMISSION_DENIED: not for you\n"


def _translate_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["translate", *flags, "hola"])


def test_request_options_carry_the_flags_given_and_only_those():
    options = remote.request_options(_translate_args(), False)
    assert options.ListFields() == []
    args = _translate_args(
        "--n-best", "2", "--beam", "3", "--json", "--target-prefix", "The",
        "--suppress", "dog", "--suppress", "cat", "--repetition-penalty", "1.2", "--top-k", "5",
    )  # fmt: skip
    options = remote.request_options(args, True)
    assert (options.num_hypotheses, options.beam_size) == (2, 3)
    assert options.return_log_probs and options.return_alignment  # --json: log-probs
    assert options.target_prefix == "The" and list(options.suppress) == ["dog", "cat"]
    assert options.repetition_penalty == pytest.approx(1.2) and options.sampling.top_k == 5
    assert not options.HasField("max_length") and not options.HasField("length_penalty")
    with pytest.raises(ValueError, match="num_hypotheses"):
        remote.request_options(_translate_args("--n-best", "-2"), False)


def test_call_options_leave_model_and_version_to_the_server_and_default_the_deadline():
    options = decoding_pb2.DecodingOptions()
    assert remote.call_options(_translate_args(), options, 60.0) == {
        "model": "",
        "version": "",
        "options": options,
        "timeout": 60.0,
    }
    args = _translate_args("--model", "m", "--model-version", "2", "--timeout", "3")
    call = remote.call_options(args, options, 60.0)
    assert (call["model"], call["version"], call["timeout"]) == ("m", "2", 3.0)


def test_proto_json_is_one_line_under_proto_names_with_every_field():
    message = translation_pb2.PartialHypothesis(text="añ", steps=2)
    line = remote.proto_json(message)
    assert "\n" not in line and "añ" in line
    assert json.loads(line) == {"text": "añ", "tokens": [], "steps": 2}


def _hypothesis(text: str, alignment=None) -> decoding_pb2.Hypothesis:
    hypothesis = decoding_pb2.Hypothesis(
        text=text, score=-0.5, log_prob=-1.0, tokens=["▁" + text], finished=True
    )
    hypothesis.token_log_probs.extend([-0.25, -0.75])
    if alignment is not None:
        hypothesis.alignment.CopyFrom(alignment)
    return hypothesis


def _response(*texts: str, alignment=None) -> translation_pb2.TranslateResponse:
    response = translation_pb2.TranslateResponse(model="translator", version="4")
    for text in texts:
        translation = response.translations.add()
        translation.hypotheses.append(_hypothesis(text.upper(), alignment))
        translation.token_counts.input_tokens = 3
        translation.token_counts.output_tokens = 2
    response.token_counts.input_tokens = 3 * len(texts)
    return response


def test_translations_read_a_response_into_results():
    alignment = decoding_pb2.Alignment(
        source_tokens=["▁a", "</s>"], target_tokens=["▁A", "</s>"], weights=[1, 0, 0.25, 0.75]
    )
    response = _response("a", "b", alignment=alignment)
    span = response.translations[1].sentences.add(source_end=1, target_end=1)
    span.alignment.CopyFrom(alignment)
    response.translations[1].glossary_applied.extend([0, 2])
    results = remote.translations(response, ["a", "b"])
    assert isinstance(results, Translations)
    assert (results.model, results.version, results.token_counts.input_tokens) == (
        "translator",
        "4",
        6,
    )
    first, second = results.translations
    assert first.source == "a" and first.hypotheses[0].text == "A"
    assert first.hypotheses[0].token_log_probs == (-0.25, -0.75)
    assert first.hypotheses[0].alignment == Alignment(
        ("▁a", "</s>"), ("▁A", "</s>"), ((1.0, 0.0), (0.25, 0.75))
    )
    assert first.sentences == () and second.glossary_applied == (0, 2)
    assert second.sentences[0].alignment.weights == ((1.0, 0.0), (0.25, 0.75))
    assert (
        remote.translations(_response("a"), ["a"]).translations[0].hypotheses[0].alignment is None
    )


def test_a_response_of_the_wrong_size_or_shape_is_a_failure():
    with pytest.raises(Failure, match=r"^1 translations for 2 texts$"):
        remote.translations(_response("a"), ["a", "b"])
    ragged = decoding_pb2.Alignment(source_tokens=["▁a"], target_tokens=["▁A"], weights=[1, 0])
    with pytest.raises(Failure, match=r"^alignment of text 6: alignment: 2 weights"):
        remote.translations(_response("a", alignment=ragged), ["a"], first=5)
    with pytest.raises(Failure, match=r"^0 captions for 1 images$"):
        remote.captions(caption_pb2.CaptionResponse(), [Path("a.png")])


def test_captions_read_a_response_with_its_attention_maps():
    response = caption_pb2.CaptionResponse(model="captioner", version="2")
    caption = response.captions.add(image_width=30, image_height=20)
    hypothesis = caption.hypotheses.add(text="a dog", tokens=["▁a", "▁dog"], finished=False)
    maps = hypothesis.attention
    maps.grid_height, maps.grid_width, maps.image_height, maps.image_width = 1, 2, 20, 30
    maps.tokens.add(token="▁a", weights=[0.5, 0.5])
    caption.hypotheses.add(text="a cat")
    (read,) = remote.captions(response, [Path("dir/dog.png")]).captions
    assert read.image == "dir/dog.png" and (read.image_width, read.image_height) == (30, 20)
    best, second = read.hypotheses
    assert best.finished is False and best.tokens == ("▁a", "▁dog")
    assert best.attention.tokens[0].weights == (0.5, 0.5) and best.attention.grid_width == 2
    assert (best.attention.image_height, best.attention.image_width) == (20, 30)
    assert second.attention is None


def _events(text: str, with_result: bool = True):
    words = text.upper().split()
    for step in range(1, len(words) + 1):
        partial = translation_pb2.PartialHypothesis(text=" ".join(words[:step]), steps=step)
        yield translation_pb2.TranslateStreamResponse(partial=partial)
    if with_result:
        yield translation_pb2.TranslateStreamResponse(result=_response(text))


def _read(texts):
    return lambda response, index: remote.translations(response, texts[index : index + 1], index)


def test_stream_each_shows_partials_then_each_result_in_order(capsys):
    texts = ["uno dos", "tres"]
    partials = io.StringIO()
    items = remote.stream_each(_events, texts, _read(texts), "text", False, partials)
    assert [item.source for item in items] == texts
    assert partials.getvalue().splitlines() == ["UNO", "UNO DOS", "TRES"]
    assert capsys.readouterr().out.splitlines() == ["UNO DOS", "TRES"]


def test_stream_each_json_prints_every_event_and_the_result_as_results(capsys):
    partials = io.StringIO()
    remote.stream_each(_events, ["uno dos"], _read(["uno dos"]), "text", True, partials)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert partials.getvalue() == ""
    assert [next(iter(e)) for e in events] == ["partial", "partial", "result"]
    assert events[1]["partial"]["text"] == "UNO DOS"
    result = events[-1]["result"]
    assert result["translations"][0]["source"] == "uno dos"  # results', not the wire's, fields


def test_a_stream_without_a_result_is_a_failure_naming_the_input(capsys):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def stream(text):
        return _events(text, with_result=text != "dos")

    terminal = Terminal()
    with pytest.raises(Failure, match=r"^the stream of image 2 ended without one result$"):
        remote.stream_each(stream, ["uno", "dos"], _read(["uno", "dos"]), "image", False, terminal)
    assert terminal.getvalue().endswith("DOS\r\x1b[K")  # the partial line cleared all the same
    assert capsys.readouterr().out == "UNO\n"


class Waiting(translation_pb2_grpc.TranslationServiceServicer):
    """Answers no call until its client goes; counts the calls begun and those cancelled."""

    def __init__(self) -> None:
        self.begun = threading.Semaphore(0)
        self.cancelled = threading.Semaphore(0)

    def _wait(self, context) -> None:
        gone = threading.Event()
        context.add_callback(gone.set)
        self.begun.release()
        if gone.wait(30) and not context.is_active():
            self.cancelled.release()

    def Translate(self, request, context):
        self._wait(context)
        return translation_pb2.TranslateResponse()

    def TranslateStream(self, request, context):
        yield translation_pb2.TranslateStreamResponse(
            partial=translation_pb2.PartialHypothesis(text="UNO")
        )
        self._wait(context)


@pytest.mark.slow  # a command line started and interrupted
@pytest.mark.parametrize(
    ("argv", "calls"),
    [(["--stream", "uno"], 1), (["--concurrency", "2", *[f"t{i}" for i in range(70)]], 2)],
)
def test_ctrl_c_cancels_the_calls_in_flight_and_exits_130_without_a_traceback(argv, calls):
    servicer = Waiting()
    server, address = translation_started(servicer)
    # As from a terminal: a SIGINT ignored where the tests run (a job put in the background by
    # a shell without job control) stays ignored across exec, so the command starts with
    # Python's own handler, as it does where SIGINT is not ignored. Not with a preexec_fn: the
    # child of a fork of this process, whose gRPC threads hold their locks, could hang before
    # exec and never call.
    command = [
        sys.executable,
        "-c",
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
        " sys.argv[0] = 'attnserve'; runpy.run_module('attnserve.cli', run_name='__main__')",
        *["translate", "--server", address, *argv],
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        for _ in range(calls):
            assert servicer.begun.acquire(timeout=60)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)  # not once the server answers, 30 s on
        assert process.returncode == 130 and "Traceback" not in err, err
        for _ in range(calls):
            assert servicer.cancelled.acquire(timeout=5)
    finally:
        process.kill()
        process.wait()
        server.stop(None)
