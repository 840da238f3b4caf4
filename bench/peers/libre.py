"""LibreTranslate 1.9.6 from `bench/peers/.venv`, on 127.0.0.1, loading only the package built
here (es -> en), with nothing fetched at run time: every directory it reads or writes under
`data/peers`, its package index a local file, its sentence splitter the blank spaCy
pipeline in the package, and any HTTP(S) it might still try sent to a closed local port."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from bench.peers import package

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
BUILD = HERE.parents[1] / "data" / "peers"  # ignored, as the other built data
START_SECONDS = 180.0
STOP_SECONDS = 15.0
NOWHERE = "http://127.0.0.1:9"  # the discard port: a proxy that refuses every connection
# what LibreTranslate is started with, beside host and port
FLAGS = ["--load-only", "es,en", "--disable-files-translation"]


def venv_python() -> Path:
    return VENV / "bin" / "python"


def installed() -> bool:
    return (VENV / "bin" / "libretranslate").exists()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def environment(build: Path = BUILD) -> dict[str, str]:
    """LibreTranslate's and argos's settings: their directories under `build`, the local
    index, spaCy as the splitter, CTranslate2 on the CPU with argos's other defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOS_", "LT_"))}
    env |= {
        "HOME": str(build / "home"),
        "XDG_DATA_HOME": str(build / "data"),
        "XDG_CONFIG_HOME": str(build / "config"),
        "XDG_CACHE_HOME": str(build / "cache"),
        "ARGOS_PACKAGES_DIR": str(build / "packages"),
        "ARGOS_PACKAGE_INDEX": (build / "index").as_uri() + "/",
        "ARGOS_CHUNK_TYPE": "SPACY",
        "ARGOS_DEVICE_TYPE": "cpu",
        "HTTP_PROXY": NOWHERE,
        "HTTPS_PROXY": NOWHERE,
        "http_proxy": NOWHERE,
        "https_proxy": NOWHERE,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    return env


def prepare(checkpoint: Path, build: Path = BUILD) -> Path:
    """The packages, an empty local package index, and the spaCy cache argos looks in at
    import (`argostranslate.networking.cache_spacy` downloads `xx_sent_ud_sm` where its
    `senter/model` is missing): a blank multilingual pipeline there. The package's path."""
    python = venv_python()
    root = package.build(checkpoint, build / "packages", python)
    package.archive(root, build / "translate-es_en.argosmodel")
    (build / "index").mkdir(parents=True, exist_ok=True)
    (build / "index" / "index.json").write_text("[]\n")
    cache = build / "cache" / "argos-translate" / "spacy"
    cache.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(python), "-c", package.BLANK_SPACY, "xx", str(cache)], check=True)
    (cache / "senter" / "model").mkdir(parents=True, exist_ok=True)
    for name in ("home", "data", "config"):
        (build / name).mkdir(parents=True, exist_ok=True)
    return root


class LibreTranslate:
    """One `libretranslate` process on 127.0.0.1:<a free port>."""

    def __init__(self, build: Path = BUILD, flags: list[str] = FLAGS):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = build / "libretranslate.log"
        self.flags = list(flags)
        command = [
            str(VENV / "bin" / "libretranslate"),
            "--host", "127.0.0.1", "--port", str(self.port), *self.flags,
        ]  # fmt: skip
        self.log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=environment(build),
            cwd=build,
            start_new_session=True,
        )

    def wait(self) -> list:
        """Its /languages once it answers; RuntimeError with its log if it does not."""
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/languages", timeout=5) as response,
            ):
                return json.loads(response.read())
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"LibreTranslate did not start: {self.log_path.read_text()[-4000:]}")

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int | None:
        """SIGTERM to its process group, then SIGKILL after STOP_SECONDS; the exit code."""
        try:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
            return self.process.returncode
        finally:
            self.log.close()
