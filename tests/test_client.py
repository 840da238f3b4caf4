"""The gRPC client and the `translate` / `health` commands, without the real server.

A stand-in TranslationService (upper-cases its input, in-process on a free port) checks what
the client sends and how the command line prints what comes back.
"""

from __future__ import annotations

import io
import json
import socket
import struct
import subprocess
import sys
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from helpers import ROOT

from attnserve.alignment import display_token, draw_alignment
from attnserve.cli import main
from attnserve.v1 import decoding_pb2, translation_pb2, translation_pb2_grpc
from service import client

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _hypotheses(text: str, options: decoding_pb2.DecodingOptions) -> list:
    count = options.num_hypotheses if options.HasField("num_hypotheses") else 1
    source = ["▁" + word for word in text.split()] + ["</s>"]
    hypotheses = []
    for rank in range(count):
        output = text.upper() + "!" * rank
        target = ["▁" + word for word in output.split()] + ["</s>"]
        hypothesis = decoding_pb2.Hypothesis(
            text=output, score=-1.0 - rank, log_prob=-2.0 - rank, tokens=target, finished=True
        )
        if options.return_log_probs:
            hypothesis.token_log_probs.extend([-0.5] * len(target))
        if options.return_alignment:
            weights = np.full((len(target), len(source)), 1 / len(source), dtype=np.float32)
            hypothesis.alignment.source_tokens.extend(source)
            hypothesis.alignment.target_tokens.extend(target)
            hypothesis.alignment.weights.extend(weights.ravel().tolist())
        hypotheses.append(hypothesis)
    return hypotheses


class StandIn(translation_pb2_grpc.TranslationServiceServicer):
    """Translates by upper-casing; refuses the text "fail" the way the server refuses a field."""

    def __init__(self) -> None:
        self.requests: list = []

    def _response(self, request, texts: list[str], context) -> translation_pb2.TranslateResponse:
        for i, text in enumerate(texts):
            if text == "fail":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"texts[{i}]: refused")
        response = translation_pb2.TranslateResponse(
            model=request.model or "translator", version=request.version or "1"
        )
        for text in texts:
            translation = response.translations.add()
            translation.hypotheses.extend(_hypotheses(text, request.options))
            translation.token_counts.input_tokens = len(text.split()) + 1
            translation.token_counts.output_tokens = len(text.split()) + 1
        response.token_counts.input_tokens = sum(len(t.split()) + 1 for t in texts)
        response.token_counts.output_tokens = response.token_counts.input_tokens
        return response

    def Translate(self, request, context):
        self.requests.append(request)
        texts = list(request.texts) + [raw.decode() for raw in request.utf8_texts]
        return self._response(request, texts, context)

    def TranslateStream(self, request, context):
        self.requests.append(request)
        text = request.text if request.HasField("text") else request.utf8_text.decode()
        words = text.upper().split()
        for step in range(1, len(words) + 1):
            partial = translation_pb2.PartialHypothesis(
                text=" ".join(words[:step]), tokens=words[:step], steps=step
            )
            yield translation_pb2.TranslateStreamResponse(partial=partial)
        yield translation_pb2.TranslateStreamResponse(
            result=self._response(request, [text], context)
        )


@pytest.fixture(scope="module")
def stand_in_server():
    servicer = StandIn()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    translation_pb2_grpc.add_TranslationServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    serving = health_pb2.HealthCheckResponse.SERVING
    health_servicer.set("", serving)
    health_servicer.set(client.SERVICE_NAME, serving)
    health_servicer.set("draining", health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


@pytest.fixture
def stand_in(stand_in_server):
    servicer, address = stand_in_server
    servicer.requests.clear()
    return servicer, address


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])


# DecodingOptions


def test_decoding_options_leave_what_is_not_given_unset():
    options = client.decoding_options()
    assert options.ListFields() == []
    for field in ("beam_size", "max_length", "length_penalty", "num_hypotheses", "sampling"):
        assert not options.HasField(field)


def test_decoding_options_set_what_is_given_even_zero():
    options = client.decoding_options(
        beam_size=0,
        max_length=40,
        length_penalty=0.0,
        num_hypotheses=2,
        return_log_probs=True,
        return_alignment=True,
    )
    assert options.HasField("beam_size") and options.beam_size == 0  # the server refuses it
    assert options.HasField("length_penalty") and options.length_penalty == 0.0
    assert (options.max_length, options.num_hypotheses) == (40, 2)
    assert options.return_log_probs and options.return_alignment
    assert not options.HasField("sampling")


def test_decoding_options_put_sampling_in_its_message():
    options = client.decoding_options(temperature=0.7, top_k=5, top_p=0.9, seed=0)
    sampling = options.sampling
    assert options.HasField("sampling")
    assert sampling.temperature == pytest.approx(0.7) and sampling.top_k == 5
    assert sampling.HasField("top_p") and sampling.top_p == pytest.approx(0.9)
    assert sampling.HasField("seed") and sampling.seed == 0
    assert not client.decoding_options(temperature=1.0).sampling.HasField("seed")
    assert not client.decoding_options(temperature=1.0).HasField("beam_size")


@pytest.mark.parametrize(("field", "value"), [("beam_size", -1), ("seed", -3), ("top_k", 1.5)])
def test_decoding_options_name_a_value_the_field_cannot_hold(field, value):
    with pytest.raises(ValueError, match=field):
        client.decoding_options(**{field: value})


# The client API


def test_translate_sends_texts_bytes_and_options(stand_in):
    servicer, address = stand_in
    with client.connect(address) as channel:
        response = client.translate(
            channel, "hola", utf8_texts=["adiós".encode()], beam_size=2, timeout=10
        )
        with pytest.raises(TypeError):
            client.translate(channel, ["a"], options=client.decoding_options(), beam_size=2)
    (request,) = servicer.requests
    assert list(request.texts) == ["hola"] and list(request.utf8_texts) == ["adiós".encode()]
    assert request.options.beam_size == 2 and not request.options.HasField("max_length")
    assert request.model == "" and request.version == ""
    assert [t.hypotheses[0].text for t in response.translations] == ["HOLA", "ADIÓS"]


def test_translate_batches_sends_at_most_batch_size_texts_per_call(stand_in):
    servicer, address = stand_in
    texts = [f"frase {i}" for i in range(5)]
    with client.connect(address) as channel:
        response = client.translate_batches(
            channel, texts, batch_size=2, model="translator", version="7", max_length=9
        )
    assert [len(r.texts) for r in servicer.requests] == [2, 2, 1]
    assert all(r.options.max_length == 9 and r.version == "7" for r in servicer.requests)
    assert [t.hypotheses[0].text for t in response.translations] == [t.upper() for t in texts]
    assert response.token_counts.input_tokens == 15 and response.version == "7"


def test_translate_stream_yields_partials_then_one_result(stand_in):
    _, address = stand_in
    with client.connect(address) as channel:
        events = list(client.translate_stream(channel, "uno dos tres", timeout=10))
        kinds = [event.WhichOneof("event") for event in events]
        assert kinds == ["partial", "partial", "partial", "result"]
        assert [event.partial.steps for event in events[:3]] == [1, 2, 3]
        assert events[-1].result.translations[0].hypotheses[0].text == "UNO DOS TRES"
        stream = client.translate_stream(channel, b"uno dos tres", timeout=10)
        assert next(stream).partial.text == "UNO"
        stream.close()  # leaving early cancels the call


def test_health_names_the_status(stand_in):
    _, address = stand_in
    with client.connect(address) as channel:
        assert client.health(channel, timeout=5) == "SERVING"
        assert client.health(channel, client.SERVICE_NAME, timeout=5) == "SERVING"
        assert client.health(channel, "draining", timeout=5) == "NOT_SERVING"
        assert client.health(channel, "no.such.Service", timeout=5) == "SERVICE_UNKNOWN"


def test_alignment_matrix_checks_its_shape():
    alignment = decoding_pb2.Alignment(
        source_tokens=["a", "b", "</s>"], target_tokens=["x", "</s>"], weights=[0.5] * 6
    )
    assert client.alignment_matrix(alignment).shape == (2, 3)
    del alignment.weights[-1]
    with pytest.raises(ValueError, match="5 weights for 2 target x 3 source"):
        client.alignment_matrix(alignment)


# The alignment heatmap


def test_display_token_drops_the_word_start_mark():
    assert [display_token(t) for t in ["▁casa", "s", "▁", "</s>", "<0xC3>"]] == [
        "casa",
        "s",
        "␣",
        "</s>",
        "<0xC3>",
    ]


def test_the_alignment_heatmap_is_a_png_labelled_with_the_tokens(tmp_path):
    source = ["▁Yo", "▁soy", "▁de", "▁Canad", "á", ".", "▁", "$5", "</s>"]
    target = ["▁I", "▁am", "▁from", "▁Canada", ".", "</s>"]
    weights = np.random.default_rng(0).random((len(target), len(source)))
    weights /= weights.sum(axis=1, keepdims=True)
    alignment = decoding_pb2.Alignment(
        source_tokens=source, target_tokens=target, weights=weights.ravel().tolist()
    )
    path = tmp_path / "alignment.png"
    figure = draw_alignment(alignment, path, title="Yo soy de Canadá.")
    axes = figure.axes[0]
    assert [label.get_text() for label in axes.get_xticklabels()] == [
        "Yo",
        "soy",
        "de",
        "Canad",
        "á",
        ".",
        "␣",
        "$5",
        "</s>",
    ]
    assert [label.get_text() for label in axes.get_yticklabels()] == [
        "I",
        "am",
        "from",
        "Canada",
        ".",
        "</s>",
    ]
    assert axes.get_images()[0].get_array().shape == (len(target), len(source))
    assert len(figure.axes) == 2  # the heatmap and its colorbar
    width, height = _png_size(path)
    assert 300 <= width <= 2000 and 200 <= height <= 2000 and width > height
    no_bar = draw_alignment(alignment, tmp_path / "plain.png", cmap="gray", colorbar=False)
    assert len(no_bar.axes) == 1


def test_an_alignment_with_a_wrong_number_of_weights_is_refused(tmp_path):
    alignment = decoding_pb2.Alignment(source_tokens=["a"], target_tokens=["b"], weights=[1, 0])
    with pytest.raises(ValueError, match="weights"):
        draw_alignment(alignment, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


# The command line over gRPC


def test_translate_leaves_options_not_given_to_the_server(stand_in, capsys):
    servicer, address = stand_in
    assert main(["translate", "--server", address, "hola mundo", "adiós"]) == 0
    assert capsys.readouterr().out.splitlines() == ["HOLA MUNDO", "ADIÓS"]
    (request,) = servicer.requests
    assert request.options.ListFields() == []
    assert request.model == "" and request.version == ""


def test_translate_reads_the_server_from_the_environment(stand_in, capsys, monkeypatch):
    _, address = stand_in
    monkeypatch.setenv("ATTNSERVE_SERVER", address)
    monkeypatch.setattr(sys, "stdin", io.StringIO("uno\n\ndos\n"))
    assert main(["translate"]) == 0
    assert capsys.readouterr().out.splitlines() == ["UNO", "DOS"]


def test_translate_passes_decoding_options_model_and_version(stand_in, capsys):
    servicer, address = stand_in
    argv = ["translate", "--server", address, "--beam", "3", "--n-best", "2", "--max-length", "9"]
    argv += ["--temperature", "0.5", "--seed", "4", "--model", "m", "--model-version", "2"]
    assert main([*argv, "hola"]) == 0
    assert capsys.readouterr().out.splitlines() == ["1\t-1.0000\tHOLA", "2\t-2.0000\tHOLA!"]
    (request,) = servicer.requests
    options = request.options
    assert (options.beam_size, options.num_hypotheses, options.max_length) == (3, 2, 9)
    assert not options.HasField("length_penalty") and not options.sampling.HasField("top_p")
    assert options.sampling.seed == 4 and options.sampling.temperature == 0.5
    assert (request.model, request.version) == ("m", "2")


def test_translate_json_is_the_response_with_log_probs_and_alignment(stand_in, capsys):
    servicer, address = stand_in
    assert main(["translate", "--server", address, "--json", "Yo soy", "de"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    response = json.loads(line)
    assert response["model"] == "translator" and len(response["translations"]) == 2
    best = response["translations"][0]["hypotheses"][0]
    assert best["text"] == "YO SOY" and best["finished"] is True
    assert len(best["token_log_probs"]) == len(best["tokens"])
    assert best["alignment"]["source_tokens"] == ["▁Yo", "▁soy", "</s>"]
    options = servicer.requests[0].options
    assert options.return_log_probs and options.return_alignment


def test_translate_stream_prints_each_partial_then_the_result(stand_in, capsys):
    _, address = stand_in
    assert main(["translate", "--server", address, "--stream", "uno dos", "tres"]) == 0
    assert capsys.readouterr().out.splitlines() == ["UNO", "UNO DOS", "UNO DOS", "TRES", "TRES"]


def test_translate_stream_rewrites_one_line_on_a_terminal(stand_in, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    _, address = stand_in
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["translate", "--server", address, "--stream", "uno dos"]) == 0
    output = terminal.getvalue()
    assert output.count("\n") == 1 and output.endswith("\r\x1b[KUNO DOS\n")
    assert "\r\x1b[KUNO\r\x1b[KUNO DOS" in output


def test_translate_stream_json_prints_every_event(stand_in, capsys):
    _, address = stand_in
    assert main(["translate", "--server", address, "--stream", "--json", "uno dos"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [next(iter(event)) for event in events] == ["partial", "partial", "result"]


def test_translate_writes_one_alignment_per_text(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    out = tmp_path / "attention.png"
    assert main(["translate", "--server", address, "--alignment", str(out), "hola"]) == 0
    assert _png_size(out)[0] > 100
    assert servicer.requests[0].options.return_alignment
    assert not servicer.requests[0].options.return_log_probs
    argv = ["translate", "--server", address, "--stream", "--alignment", str(out), "a b", "c"]
    assert main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "attention-1.png",
        "attention-2.png",
        "attention.png",
    ]


def test_a_refused_request_is_one_line_on_stderr_and_status_1(stand_in, capsys):
    _, address = stand_in
    for extra in ([], ["--stream"]):
        assert main(["translate", "--server", address, *extra, "fail"]) == 1
        captured = capsys.readouterr()
        assert captured.err == "error: INVALID_ARGUMENT: texts[0]: refused\n"


def test_an_unreachable_server_is_unavailable_within_the_timeout(capsys):
    address = f"127.0.0.1:{_free_port()}"
    start = time.monotonic()
    assert main(["translate", "--server", address, "--timeout", "3", "hola"]) == 1
    assert main(["health", "--server", address, "--timeout", "3"]) == 1
    assert time.monotonic() - start < 8
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: UNAVAILABLE: ") for line in err)


def test_health_exits_0_only_when_serving(stand_in, capsys):
    _, address = stand_in
    assert main(["health", "--server", address]) == 0
    assert main(["health", "--server", address, "--service", client.SERVICE_NAME]) == 0
    assert main(["health", "--server", address, "--service", "draining"]) == 1
    assert main(["health", "--server", address, "--service", "nope"]) == 1
    assert capsys.readouterr().out.split() == [
        "SERVING",
        "SERVING",
        "NOT_SERVING",
        "SERVICE_UNKNOWN",
    ]


def test_a_value_no_request_can_carry_is_a_usage_error(capsys):
    assert main(["translate", "--server", "127.0.0.1:1", "--beam", "-1", "hola"]) == 2
    assert "beam_size" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--engine", "torch", "--stream"],
        ["--engine", "torch", "--server", "127.0.0.1:1"],
        ["--engine", "torch", "--alignment", "a.png"],
        ["--checkpoint", "models/checkpoints/translator"],
    ],
)
def test_options_of_the_other_engine_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["translate", *argv, "hola"])
    assert exit_.value.code == 2
    assert "only with --engine" in capsys.readouterr().err


def test_the_grpc_client_runs_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"
        "from attnserve.cli import main\n"
        f"code = main(['translate', '--server', '127.0.0.1:{_free_port()}', '--timeout', '3', "
        "'hola'])\n"
        "assert 'models.commands' not in sys.modules\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: UNAVAILABLE: "), result.stderr
