"""The gRPC client and the `translate` / `caption` / `health` commands, without the real server.

The stand-in TranslationService (upper-cases its input) and CaptionService (describes each
image by its bytes, or by its size when it is a PNG) of tests/stand_ins.py, in process on a free
port, check what the client sends and how the command line prints what comes back.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import socket
import struct
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from helpers import ROOT
from stand_ins import CAPTION_GRID, PNG_SIGNATURE, CaptionStandIn, StandIn, started

from attnserve.alignment import draw_alignment
from attnserve.cli import main
from service import client
from service.tokens import display_token
from service.wire.v1 import (
    caption_pb2_grpc,
    decoding_pb2,
    translation_pb2_grpc,
)


@pytest.fixture(scope="module")
def stand_in_server():
    servicer = StandIn()
    health_servicer = health.HealthServicer()
    serving = health_pb2.HealthCheckResponse.SERVING
    health_servicer.set("", serving)
    health_servicer.set(client.SERVICE_NAME, serving)
    health_servicer.set("draining", health_pb2.HealthCheckResponse.NOT_SERVING)

    def register(server) -> None:
        translation_pb2_grpc.add_TranslationServiceServicer_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    server, address = started(register)
    yield servicer, address
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


def test_decoding_options_take_one_suppressed_phrase_as_a_str():
    """A str is one word or phrase, as `translate` takes one text as a str: not its letters,
    which would ban every one-letter word ("a") and leave the word itself free."""
    assert list(client.decoding_options(suppress="sofa").suppress) == ["sofa"]
    assert list(client.decoding_options(suppress=["sofa", "el gato"]).suppress) == [
        "sofa",
        "el gato",
    ]
    assert list(client.decoding_options().suppress) == []


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


def test_the_batch_functions_take_one_text_or_image_as_one(stand_in, captioner):
    """A str given to translate_batches was sent a character a text; bytes given to
    caption_batches, 64 bytes an image: one text or image is one, as translate and caption
    take it."""
    with client.connect(stand_in[1]) as channel:
        response = client.translate_batches(channel, "Hola.", batch_size=2)
    assert [list(r.texts) for r in stand_in[0].requests] == [["Hola."]]
    assert [t.hypotheses[0].text for t in response.translations] == ["HOLA."]
    image = b"imagen " * 30  # 210 bytes, one image
    with client.connect(captioner[1]) as channel:
        captions = client.caption_batches(channel, image, batch_size=2)
    assert [list(r.images) for r in captioner[0].requests] == [[image]]
    assert len(captions.captions) == 1


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


def test_translate_stream_shows_partials_on_stderr_and_results_alone_on_stdout(stand_in, capsys):
    """stdout, piped or redirected, holds the translations one a line as without --stream."""
    _, address = stand_in
    assert main(["translate", "--server", address, "--stream", "uno dos", "tres"]) == 0
    shown = capsys.readouterr()
    assert shown.err.splitlines() == ["UNO", "UNO DOS", "TRES"]
    assert shown.out.splitlines() == ["UNO DOS", "TRES"]


def test_translate_stream_rewrites_one_line_on_a_terminal(stand_in, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    _, address = stand_in
    terminal, stdout = Terminal(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["translate", "--server", address, "--stream", "uno dos"]) == 0
    output = terminal.getvalue()
    assert "\n" not in output and output.endswith("\r\x1b[KUNO DOS\r\x1b[K")  # cleared
    assert "\r\x1b[KUNO\r\x1b[KUNO DOS" in output
    assert stdout.getvalue() == "UNO DOS\n"


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
    for extra, partials in (([], []), (["--stream"], ["FAIL"])):  # the stand-in's partial
        assert main(["translate", "--server", address, *extra, "fail"]) == 1
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [
            *partials,
            "error: INVALID_ARGUMENT: texts[0]: refused",
        ]
        assert captured.out == ""


def test_an_unreachable_server_is_unavailable_within_the_timeout(capsys):
    address = f"127.0.0.1:{_free_port()}"
    start = time.monotonic()
    assert main(["translate", "--server", address, "--timeout", "3", "hola"]) == 1
    assert main(["health", "--server", address, "--timeout", "3"]) == 1
    assert time.monotonic() - start < 8
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: UNAVAILABLE: ") for line in err)


def test_a_value_no_request_can_carry_is_a_usage_error(capsys):
    assert main(["translate", "--server", "127.0.0.1:1", "--beam", "-1", "hola"]) == 2
    assert "beam_size" in capsys.readouterr().err


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


# The caption client and command


@pytest.fixture(scope="module")
def caption_server():
    servicer = CaptionStandIn()
    server, address = started(
        lambda server: caption_pb2_grpc.add_CaptionServiceServicer_to_server(servicer, server)
    )
    yield servicer, address
    server.stop(None)


@pytest.fixture
def captioner(caption_server):
    servicer, address = caption_server
    servicer.requests.clear()
    return servicer, address


def _png(path, width: int, height: int):
    from PIL import Image

    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:, : width // 2] = (200, 30, 30)
    Image.fromarray(pixels).save(path)
    return path


def _texts(response) -> list[str]:
    return [caption.hypotheses[0].text for caption in response.captions]


def test_the_client_batches_as_many_images_as_the_server_takes():
    from service.runtime.captioning import MAX_IMAGES

    assert client.IMAGES_PER_REQUEST == MAX_IMAGES
    assert client.CAPTION_SERVICE == "attnserve.v1.CaptionService"
    assert client.SERVICE_NAME == "attnserve.v1.TranslationService"


def test_caption_sends_images_options_and_the_attention_flag(captioner):
    servicer, address = captioner
    with client.connect(address) as channel:
        one = client.caption(channel, b"una casa", beam_size=2, timeout=10)
        both = client.caption(
            channel, [b"uno", bytearray(b"dos")], model="m", version="3", return_attention=True
        )
        with pytest.raises(TypeError, match="bytes"):
            client.caption(channel, "photo.png")
        with pytest.raises(TypeError):
            client.caption(channel, b"a", options=client.decoding_options(), beam_size=2)
    first, second = servicer.requests
    assert list(first.images) == [b"una casa"] and not first.return_attention
    assert first.options.beam_size == 2 and not first.options.HasField("max_length")
    assert (first.model, first.version) == ("", "")
    assert list(second.images) == [b"uno", b"dos"] and second.return_attention
    assert (second.model, second.version) == ("m", "3")
    assert _texts(one) == ["UNA CASA"] and _texts(both) == ["UNO", "DOS"]
    assert both.captions[1].hypotheses[0].attention.grid_width == 4


def test_caption_batches_sends_at_most_64_images_a_call_and_merges_in_order(captioner):
    servicer, address = captioner
    images = [f"imagen {i}".encode() for i in range(130)]
    done = []
    with client.connect(address) as channel:
        response = client.caption_batches(
            channel, images, progress=done.append, version="7", max_length=9, timeout=10
        )
        small = client.caption_batches(channel, images[:5], batch_size=2)
        assert client.caption_batches(channel, []).captions == []
        with pytest.raises(ValueError, match="batch_size"):
            client.caption_batches(channel, images, batch_size=0)
    assert [len(r.images) for r in servicer.requests] == [64, 64, 2, 2, 2, 1]
    assert all(r.options.max_length == 9 and r.version == "7" for r in servicer.requests[:3])
    assert done == [64, 128, 130]
    assert _texts(response) == [f"IMAGEN {i}" for i in range(130)]
    assert response.token_counts.input_tokens == 130 * 12
    assert response.token_counts.output_tokens == 130 * 3
    assert (response.model, response.version) == ("captioner", "7")
    assert _texts(small) == [f"IMAGEN {i}" for i in range(5)]


def test_caption_batches_keep_each_call_within_the_servers_message_limit(captioner, monkeypatch):
    from service.front.config import MAX_RECEIVE_BYTES

    assert client.REQUEST_BYTES == MAX_RECEIVE_BYTES
    full = client.caption_pb2.CaptionRequest(
        model="m" * 100,
        version="1" * 20,
        images=[bytes(client.IMAGE_BYTES_PER_REQUEST // 64)] * 64,
        options=client.decoding_options(beam_size=4, max_length=50, num_hypotheses=4),
        return_attention=True,
    )
    assert full.ByteSize() <= client.REQUEST_BYTES
    servicer, address = captioner
    monkeypatch.setattr(client, "IMAGE_BYTES_PER_REQUEST", 1000)
    sizes = [400, 400, 400, 1500, 300, 600, 100]
    images = [f"imagen {i} ".encode().ljust(size, b".") for i, size in enumerate(sizes)]
    with client.connect(address) as channel:
        response = client.caption_batches(channel, images, batch_size=2)
    sent = [[len(image) for image in r.images] for r in servicer.requests]
    assert sent == [[400, 400], [400], [1500], [300, 600], [100]]
    assert [text.split()[1] for text in _texts(response)] == [str(i) for i in range(7)]


def test_a_refused_image_of_many_calls_is_named_by_its_place_among_all(captioner, tmp_path, capsys):
    _, address = captioner
    images = [b"uno"] * 5 + [b"fail", b"dos"]
    with client.connect(address) as channel:
        with pytest.raises(grpc.RpcError) as late:
            client.caption_batches(channel, images, batch_size=2)
        with pytest.raises(grpc.RpcError) as first:
            client.caption_batches(channel, images[3:], batch_size=4)
    assert late.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert late.value.details() == "images[5]: not an image"  # the call said images[1]
    assert first.value.details() == "images[2]: not an image"
    files = []
    for index in range(70):
        files.append(tmp_path / f"{index:02}.png")
        files[-1].write_bytes(b"fail" if index == 66 else b"tres")
    assert main(["caption", "--server", address, *map(str, files)]) == 1
    assert capsys.readouterr().err.endswith("error: INVALID_ARGUMENT: images[66]: not an image\n")


def test_a_refused_text_of_many_calls_is_named_by_its_place_among_all(stand_in):
    _, address = stand_in
    texts = ["uno", "dos", "tres", "fail"]
    with client.connect(address) as channel, pytest.raises(grpc.RpcError) as refused:
        client.translate_batches(channel, texts, batch_size=3, concurrency=2)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == "texts[3]: refused"
    assert client.status_text(refused.value) == "INVALID_ARGUMENT: texts[3]: refused"


def test_caption_stream_yields_partials_then_one_result(captioner):
    servicer, address = captioner
    with client.connect(address) as channel:
        events = list(client.caption_stream(channel, b"un perro rojo", return_attention=True))
        assert [event.WhichOneof("event") for event in events] == [
            "partial",
            "partial",
            "partial",
            "result",
        ]
        assert [event.partial.text for event in events[:3]] == ["UN", "UN PERRO", "UN PERRO ROJO"]
        best = events[-1].result.captions[0].hypotheses[0]
        assert best.text == "UN PERRO ROJO" and len(best.attention.tokens) == 4
        stream = client.caption_stream(channel, b"uno dos", beam_size=3, timeout=10)
        assert next(stream).partial.text == "UNO"
        stream.close()  # leaving early cancels the call
    assert servicer.requests[0].image == b"un perro rojo" and servicer.requests[0].return_attention
    assert servicer.requests[1].options.beam_size == 3


def test_attention_maps_are_token_by_row_by_column_grids():
    maps = decoding_pb2.AttentionMaps(grid_height=2, grid_width=3, image_height=20, image_width=30)
    maps.tokens.add(token="▁a", weights=[0, 0, 0, 0, 0, 1])  # the bottom right cell
    maps.tokens.add(token="</s>", weights=[1, 0, 0, 0, 0, 0])
    weights = client.attention_maps(maps)
    assert weights.shape == (2, 2, 3) and weights.dtype == np.float32
    assert weights[0, 1, 2] == 1 and weights[0].sum() == 1 and weights[1, 0, 0] == 1
    maps.tokens.add(token="▁b", weights=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"token 2 .* 2 weights for a 2 x 3 grid"):
        client.attention_maps(maps)
    with pytest.raises(ValueError, match="0 x 0 grid"):
        client.attention_maps(decoding_pb2.AttentionMaps())


def test_the_attention_figure_takes_the_grids_of_a_response():
    from service.attention_figure import draw_attention

    image = np.zeros((30, 40, 3), dtype=np.uint8)
    attention = np.zeros((2, 3, 4), dtype=np.float32)
    attention[0, 2, 3] = attention[1, 0, 0] = 1
    figure = draw_attention(image, ["▁a", "</s>"], attention)
    assert [ax.get_title() for ax in figure.axes[:3]] == ["image", "a", "</s>"]
    heat = figure.axes[1].get_images()[1].get_array()
    assert heat.shape == (30, 40) and heat[29, 39] > 0.9 and heat[0, 0] < 0.05
    with pytest.raises(ValueError, match="for a 4 x 3 grid"):
        draw_attention(image, ["▁a", "</s>"], attention, (4, 3))
    with pytest.raises(ValueError, match="no grid"):
        draw_attention(image, ["▁a", "</s>"], attention.reshape(2, 12))


def test_caption_prints_one_line_per_image_in_order(captioner, tmp_path, capsys):
    servicer, address = captioner
    paths = [_png(tmp_path / "wide.png", 40, 30), _png(tmp_path / "tall.png", 20, 50)]
    assert main(["caption", "--server", address, *map(str, paths)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["a 40 by 30 image", "a 20 by 50 image"]
    assert captured.err == ""  # no progress bar for one request
    (request,) = servicer.requests
    assert list(request.images) == [path.read_bytes() for path in paths]  # sent as they are
    assert request.options.ListFields() == [] and not request.return_attention


def test_caption_passes_decoding_options_model_and_version(captioner, tmp_path, capsys):
    servicer, address = captioner
    path = _png(tmp_path / "a.png", 8, 8)
    argv = ["caption", "--server", address, "--beam", "3", "--n-best", "2", "--max-length", "9"]
    argv += ["--model", "m", "--version", "2", "--timeout", "5", str(path)]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == [
        "1\t-1.0000\ta 8 by 8 image",
        "2\t-2.0000\ta 8 by 8 image!",
    ]
    (request,) = servicer.requests
    assert (request.options.beam_size, request.options.num_hypotheses) == (3, 2)
    assert request.options.max_length == 9 and not request.options.HasField("length_penalty")
    assert (request.model, request.version) == ("m", "2")


@pytest.mark.parametrize("stream", [[], ["--stream"]])
def test_caption_json_names_a_file_whose_name_is_not_utf8_in_valid_json(
    captioner, tmp_path, monkeypatch, stream
):
    """A name in latin-1 bytes (Python keeps them as surrogates) was written raw into the
    JSON by a UTF-8 stdout with surrogateescape (Python's own under the C locale): bytes no
    JSON reader decodes. Its bytes that are not UTF-8 are now \\xNN escapes."""
    _, address = captioner
    path = _png(tmp_path / os.fsdecode(b"caf\xe9.png"), 40, 30)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["caption", "--server", address, "--json", *stream, str(path)]) == 0
    stdout.flush()
    *_, line = stdout.buffer.getvalue().decode("utf-8").splitlines()
    result = json.loads(line)
    (caption,) = result.get("result", result)["captions"]
    assert caption["image"] == str(tmp_path / "caf\\xe9.png")


def test_caption_json_is_the_response_with_attention_maps(captioner, tmp_path, capsys):
    servicer, address = captioner
    path = _png(tmp_path / "a.png", 40, 30)
    assert main(["caption", "--server", address, "--json", str(path), str(path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    response = json.loads(line)
    assert response["model"] == "captioner" and len(response["captions"]) == 2
    caption = response["captions"][0]
    assert (caption["image_width"], caption["image_height"]) == (40, 30)
    best = caption["hypotheses"][0]
    assert best["text"] == "a 40 by 30 image" and best["finished"] is True
    assert len(best["token_log_probs"]) == len(best["tokens"]) + 1
    maps = best["attention"]
    assert (maps["grid_height"], maps["grid_width"]) == CAPTION_GRID
    assert [t["token"] for t in maps["tokens"]] == ["▁a", "▁40", "▁by", "▁30", "▁image", "</s>"]
    (request,) = servicer.requests
    assert request.return_attention and request.options.return_log_probs
    assert not request.options.return_alignment


def test_caption_of_many_images_shows_progress_on_stderr(captioner, tmp_path, capsys, monkeypatch):
    servicer, address = captioner
    paths = [tmp_path / f"{i}.bin" for i in range(70)]
    for i, path in enumerate(paths):
        path.write_bytes(f"imagen {i}".encode())
    argv = ["caption", "--server", address, *map(str, paths)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"IMAGEN {i}" for i in range(70)]
    assert "70/70" in captured.err  # tqdm's bar
    monkeypatch.setitem(sys.modules, "tqdm", None)  # without tqdm: a plain counter
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 70
    assert captured.err.splitlines() == ["captioned 64/70 images", "captioned 70/70 images"]
    assert [len(r.images) for r in servicer.requests] == [64, 6, 64, 6]


def test_caption_stream_shows_partials_on_stderr_and_captions_on_stdout(
    captioner, tmp_path, capsys
):
    _, address = captioner
    first, second = tmp_path / "1.bin", tmp_path / "2.bin"
    first.write_bytes(b"un perro")
    second.write_bytes(b"gato")
    assert main(["caption", "--server", address, "--stream", str(first), str(second)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["UN PERRO", "GATO"]
    assert captured.err.splitlines() == ["UN", "UN PERRO", "GATO"]
    assert main(["caption", "--server", address, "--stream", "--json", str(second)]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [next(iter(event)) for event in events] == ["partial", "result"]
    assert events[-1]["result"]["captions"][0]["hypotheses"][0]["attention"]["grid_width"] == 4


def test_caption_draws_the_attention_figure_from_the_server_maps(captioner, tmp_path, capsys):
    servicer, address = captioner
    image = _png(tmp_path / "scene.png", 160, 120)
    out = tmp_path / "attention.png"
    assert main(["caption", "--server", address, "--attention", str(out), str(image)]) == 0
    assert capsys.readouterr().out == "a 160 by 120 image\n"
    assert servicer.requests[0].return_attention
    assert not servicer.requests[0].options.return_log_probs
    width, height = _png_size(out)
    assert width >= 500 and height >= 200  # five panels a row: the image and 6 tokens
    assert out.stat().st_size > 5000
    argv = ["caption", "--server", address, "--stream", "--attention", str(out), str(image)]
    assert main([*argv, str(_png(tmp_path / "small.png", 16, 16))]) == 0
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("attention"))
    assert names == ["attention-1.png", "attention-2.png", "attention.png"]
    assert _png_size(tmp_path / "attention-2.png")[0] >= 500


def test_caption_attention_needs_an_image_pillow_can_read(captioner, tmp_path, capsys):
    _, address = captioner
    path = tmp_path / "words.bin"
    path.write_bytes(b"no es una imagen")
    out = tmp_path / "attention.png"
    assert main(["caption", "--server", address, "--attention", str(out), str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "NO ES UNA IMAGEN\n"
    assert captured.err.startswith("error: attention of image 1: ")
    assert not out.exists()


def test_caption_failures_exit_2_for_files_and_1_for_the_server(captioner, tmp_path, capsys):
    servicer, address = captioner
    missing = tmp_path / "none.png"
    assert main(["caption", "--server", address, str(missing)]) == 2
    assert capsys.readouterr().err == f"error: {missing}: No such file or directory\n"
    assert main(["caption", "--server", address, "--beam", "-1", str(missing)]) == 2
    assert "beam_size" in capsys.readouterr().err
    assert servicer.requests == []  # nothing sent
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"fail")
    for extra in ([], ["--stream"]):
        assert main(["caption", "--server", address, *extra, str(bad)]) == 1
        assert capsys.readouterr().err == "error: INVALID_ARGUMENT: images[0]: not an image\n"


def test_the_caption_client_runs_without_torch(tmp_path):
    image = tmp_path / "image.bin"
    image.write_bytes(b"imagen")
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"
        "from attnserve.cli import main\n"
        f"code = main(['caption', '--server', '127.0.0.1:{_free_port()}', '--timeout', '3', "
        f"{str(image)!r}])\n"
        "assert 'models.caption_commands' not in sys.modules\n"
        "assert 'service.runtime.captioning' not in sys.modules\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: UNAVAILABLE: "), result.stderr


def test_translate_batches_keeps_order_with_calls_in_flight_and_reports_progress(stand_in):
    servicer, address = stand_in
    texts = [f"frase {i}" for i in range(23)]
    seen = []
    with client.connect(address) as channel:
        response = client.translate_batches(
            channel, texts, batch_size=3, concurrency=4, progress=seen.append
        )
        with pytest.raises(ValueError, match="concurrency"):
            client.translate_batches(channel, texts, concurrency=0)
    assert sorted(len(r.texts) for r in servicer.requests) == [2] + [3] * 7
    assert [t.hypotheses[0].text for t in response.translations] == [t.upper() for t in texts]
    assert seen == sorted(seen) and seen[-1] == 23 and len(seen) == 8


def test_translate_command_reads_input_writes_output_with_progress(stand_in, tmp_path, capsys):
    _, address = stand_in
    source = tmp_path / "es.txt"
    source.write_text("".join(f"linea {i}\n" for i in range(70)) + "\n", encoding="utf-8")
    target = tmp_path / "en.txt"
    argv = ["translate", "--server", address, "--input", str(source), "--output", str(target)]
    assert main([*argv, "--lines", "--concurrency", "2"]) == 0
    assert target.read_text(encoding="utf-8").splitlines() == [f"LINEA {i}" for i in range(70)]
    captured = capsys.readouterr()
    assert captured.out == "" and "70/70" in captured.err  # 70 texts: two calls, a progress
    assert main(["translate", "--server", address, "--input", str(tmp_path / "none")]) == 2
    with pytest.raises(SystemExit) as refused:  # the local engine reads arguments or stdin
        main(["translate", "--engine", "torch", "--input", str(source)])
    assert refused.value.code == 2


def test_translate_command_keeps_a_documents_paragraphs(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    source, target = tmp_path / "es.txt", tmp_path / "en.txt"
    document = "Hola.\n\n  Adiós, amigo. Vuelve pronto.\n\n\nFin.\n"
    source.write_text(document, encoding="utf-8")
    argv = ["translate", "--server", address, "--input", str(source), "--output", str(target)]
    assert main(argv) == 0
    assert target.read_text(encoding="utf-8") == document.upper()  # the stand-in upper-cases
    assert [list(r.texts) for r in servicer.requests[-1:]] == [[document]]  # one text, one call
    assert capsys.readouterr().out == ""


def test_translate_command_refuses_what_it_cannot_do_before_it_sends(
    stand_in, tmp_path, capsys, monkeypatch
):
    """A user's mistake is one line and an exit status, never a traceback, and a document is
    not translated for an --output that cannot be written."""
    servicer, address = stand_in
    source = tmp_path / "es.txt"
    source.write_text("Hola.\n", encoding="utf-8")
    server = ["translate", "--server", address]
    for output in (tmp_path / "missing" / "en.txt", tmp_path):
        with pytest.raises(SystemExit) as refused:
            main([*server, "--input", str(source), "--output", str(output)])
        assert refused.value.code == 2 and "--output" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main([*server, "Hola", "--concurrency", "0"])
    assert refused.value.code == 2 and "must be 1 or more" in capsys.readouterr().err
    assert servicer.requests == []  # nothing was sent
    pem = tmp_path / "client.pem"
    pem.write_text("x", encoding="utf-8")
    assert main([*server, "Hola", "--tls-cert", str(pem)]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err
    assert main([*server, "Hola", "--tls-ca", str(tmp_path / "none.pem")]) == 1
    assert capsys.readouterr().err.startswith("error: TLS: ")
    for command in ("translate", "score"):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9\tcafe\n")))
        assert main([command, "--server", address]) == 2
        assert capsys.readouterr().err.startswith("error: standard input: 'utf-8' codec")
    assert servicer.requests == []


def test_a_text_document_keeps_its_line_breaks_encoding_and_byte_order_mark(stand_in, tmp_path):
    _, address = stand_in
    source, target = tmp_path / "es.txt", tmp_path / "en.txt"
    argv = ["translate", "--server", address, "--input", str(source), "--output", str(target)]
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le")):
        source.write_bytes(bom + "Hola.\r\n\r\nAdiós.\r\n".encode(encoding))
        assert main(argv) == 0
        assert target.read_bytes() == bom + "HOLA.\r\n\r\nADIÓS.\r\n".encode(encoding)


def test_a_document_is_cut_into_texts_at_paragraph_breaks():
    text = "uno dos.\n\ntres.\ncuatro cinco seis.\n\nsiete"
    for most in (6, 12, 20, 100):
        parts = client.document_parts(text, most)
        assert "".join(parts) == text and all(len(p) <= most for p in parts)
    # a paragraph break first, a line break only where a paragraph is too long
    assert client.document_parts(text, 20) == [
        "uno dos.\n\n",
        "tres.\n",
        "cuatro cinco seis.\n\n",
        "siete",
    ]
