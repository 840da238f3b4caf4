"""The Node.js example client (examples/node/client.js) against the session's real server: it
prints what the Python client gets for the same requests (server defaults: greedy search),
reports a refused request as the status name on stderr with exit status 1, and sends
$ATTNSERVE_TOKEN as the bearer token (checked on a stand-in server that echoes it back)."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent import futures

import grpc
import pytest
from helpers import ROOT
from servers import rpc_error

from service import client
from service.wire.v1 import decoding_pb2, translation_pb2, translation_pb2_grpc

NODE = shutil.which("node")
EXAMPLE = ROOT / "examples" / "node"
SCENE = ROOT / "examples" / "scene.png"
SENTENCES = ["Yo soy de Canadá.", "¿Dónde está la estación de tren?"]
CALL_TIMEOUT = 60.0  # seconds, a Python call and a Node process each

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH (./dev.sh installs it)")


def node_client(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
    """`node client.js ARGS` from the repository root; the token, when given, as
    $ATTNSERVE_TOKEN (never the caller's own)."""
    assert (EXAMPLE / "node_modules").is_dir(), "run `npm ci --prefix examples/node` (./dev.sh)"
    env = {k: v for k, v in os.environ.items() if k != client.TOKEN_ENVIRONMENT}
    if token is not None:
        env[client.TOKEN_ENVIRONMENT] = token
    return subprocess.run(
        [NODE, str(EXAMPLE / "client.js"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=CALL_TIMEOUT,
    )


def test_node_translations_are_the_python_clients(server):
    expected = client.translate(server.channel, SENTENCES, timeout=CALL_TIMEOUT)
    lines = [translation.hypotheses[0].text for translation in expected.translations]
    assert len(lines) == 2 and all(lines)

    done = node_client("--target", server.address, "translate", *SENTENCES)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"{line}\n" for line in lines)
    assert done.stderr == ""


def test_node_controls_html_glossary_and_scores_are_the_python_clients(server):
    page = "<p>El gato está <b>durmiendo</b>.</p>"
    expected = (
        client.translate(
            server.channel, [page], timeout=CALL_TIMEOUT, text_format="html", target_prefix="The"
        )
        .translations[0]
        .hypotheses[0]
        .text
    )
    assert expected.startswith("<p>The") and "<b>" in expected
    done = node_client("--target", server.address, "--html", "--prefix", "The", "translate", page)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{expected}\n"
    text = "Cambia tu contraseña."
    glossary = [("contraseña", "passphrase")]
    expected = client.translate(server.channel, [text], timeout=CALL_TIMEOUT, glossary=glossary)
    assert "passphrase" in expected.translations[0].hypotheses[0].text
    done = node_client(
        "--target", server.address, "--term", "contraseña=passphrase", "translate", text
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{expected.translations[0].hypotheses[0].text}\n"
    done = node_client("--target", server.address, "--term", "contraseña", "translate", text)
    assert done.returncode == 2 and "SOURCE=TARGET" in done.stderr
    pair = (SENTENCES[0], "I am from Canada.")
    score = client.score(server.channel, [pair], timeout=CALL_TIMEOUT).scores[0]
    done = node_client("--target", server.address, "score", *pair)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{score.mean_log_prob:.4f}\n"


def test_node_caption_is_the_python_clients(server):
    expected = client.caption(server.channel, SCENE.read_bytes(), timeout=CALL_TIMEOUT)
    (caption,) = expected.captions
    assert caption.hypotheses[0].text

    done = node_client("--target", server.address, "caption", str(SCENE))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{caption.hypotheses[0].text}\n"


def test_a_refused_request_exits_1_with_the_status_on_stderr(server):
    error = rpc_error(lambda: client.translate(server.channel, [""], timeout=CALL_TIMEOUT))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

    done = node_client("--target", server.address, "translate", "")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == f"error: {client.status_text(error)}\n"  # as `attnserve translate`


class EchoToken(translation_pb2_grpc.TranslationServiceServicer):
    """Translates every text to the call's authorization metadata (or "none")."""

    def Translate(self, request, context):
        metadata = dict(context.invocation_metadata())
        hypothesis = decoding_pb2.Hypothesis(text=metadata.get("authorization", "none"))
        translation = translation_pb2.Translation(hypotheses=[hypothesis])
        return translation_pb2.TranslateResponse(translations=[translation] * len(request.texts))


def test_the_token_of_the_environment_goes_as_a_bearer_token():
    stand_in = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    translation_pb2_grpc.add_TranslationServiceServicer_to_server(EchoToken(), stand_in)
    address = f"127.0.0.1:{stand_in.add_insecure_port('127.0.0.1:0')}"
    stand_in.start()
    try:
        with_token = node_client("--target", address, "translate", "Hola.", token="s3cret-" * 3)
        without = node_client("--target", address, "translate", "Hola.")
    finally:
        stand_in.stop(None)
    assert (with_token.returncode, with_token.stdout) == (0, "Bearer s3cret-s3cret-s3cret-\n")
    assert (without.returncode, without.stdout) == (0, "none\n")


@pytest.mark.parametrize("flag", ["--target", "--prefix", "--suppress", "--term"])
def test_an_option_without_its_value_is_named_as_such(flag):
    """An option given last, its value forgotten, was called unknown ("unknown option
    --target"), though the usage printed under the message lists it."""
    done = node_client(flag)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {flag} needs a value\nusage: ")
