"""bench/gpu.sh: its usage names every phase, and every benchmark command a phase runs takes
the flags it is given (each module's own --help lists them), so that no phase breaks on the GPU
machine for a reason the CPU shows."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import ROOT

SCRIPT = (ROOT / "bench" / "gpu.sh").read_text()


def _phases() -> list[str]:
    return re.findall(r"^  ([a-z][a-z-]*)\)", SCRIPT, flags=re.MULTILINE)


def _commands() -> dict[str, set[str]]:
    """{module: every flag the script passes it}, backslash-continued lines joined."""
    joined = SCRIPT.replace("\\\n", " ")
    flags: dict[str, set[str]] = {}
    for line in joined.splitlines():
        for module, rest in re.findall(r"python3 -m (bench\.[a-z_]+)([^|>;]*)", line):
            flags.setdefault(module, set()).update(re.findall(r"(--[a-z][a-z-]*)", rest))
    return flags


def test_the_usage_names_every_phase():
    usage = re.search(r'echo "usage: bench/gpu.sh ([^" ]+)"', SCRIPT)
    assert usage is not None
    phases = _phases()
    assert {"export", "pending", "goals", "steady", "controls-cost"} <= set(phases)
    assert sorted(usage.group(1).split("|")) == sorted(phases)


def test_every_benchmark_command_takes_the_flags_the_script_gives_it():
    commands = _commands()
    assert {"bench.gpu", "bench.continuous", "bench.profile_scheduler"} <= set(commands)
    for module, flags in commands.items():
        done = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (module, done.stderr[-2000:])
        unknown = {f for f in flags if not re.search(rf"{re.escape(f)}\b", done.stdout)}
        assert not unknown, (module, unknown)
