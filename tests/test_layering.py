"""The serving path runs without torch."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT

BLOCK_TORCH = "import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"


def test_service_modules_and_the_cli_import_without_torch():
    code = BLOCK_TORCH + (
        "import pkgutil, importlib, service\n"
        "names = [m.name for m in pkgutil.iter_modules(service.__path__)]\n"
        "for name in names: importlib.import_module('service.' + name)\n"
        "import attnserve.cli\n"
        "print(len(names))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 5


def test_torch_side_commands_say_so_when_torch_is_missing():
    code = BLOCK_TORCH + "from attnserve.cli import main; main(['evaluate', 'translator'])"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "torch" in result.stderr
