"""Installs the Debian packages a data build reads, when they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess


def missing_debian_packages(names: tuple[str, ...]) -> list[str]:
    if shutil.which("dpkg-query") is None:
        return list(names)
    missing = []
    for name in names:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True
        )
        if "install ok installed" not in result.stdout:
            missing.append(name)
    return missing


def ensure_debian_packages(names: tuple[str, ...]) -> None:
    """apt-get installs what is missing; without root, says which command to run."""
    missing = missing_debian_packages(names)
    if not missing:
        return
    command = ["apt-get", "install", "-y", "-q", *missing]
    if os.geteuid() != 0:
        raise RuntimeError(f"missing Debian packages; run: sudo {' '.join(command)}")
    subprocess.run(["apt-get", "update", "-q"], check=True)
    subprocess.run(command, check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
