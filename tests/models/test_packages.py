"""The Debian packages a data build reads: which are missing (dpkg's status), and installing
them, or without root the command to run."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from models import packages
from models.packages import ensure_debian_packages, missing_debian_packages

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian system")


@needs_dpkg
def test_installed_packages_are_not_missing_and_unknown_ones_are():
    missing = missing_debian_packages(("dpkg", "attnserve-no-such-package"))
    assert missing == ["attnserve-no-such-package"]
    assert missing_debian_packages(()) == []


def test_without_dpkg_every_package_is_missing(monkeypatch):
    monkeypatch.setattr(packages.shutil, "which", lambda name: None)
    assert missing_debian_packages(("dpkg", "bash")) == ["dpkg", "bash"]


@needs_dpkg
def test_nothing_missing_runs_nothing(monkeypatch):
    run = subprocess.run
    commands = []

    def recording(command, *args, **kwargs):
        commands.append(command[0])
        return run(command, *args, **kwargs)

    monkeypatch.setattr(packages.subprocess, "run", recording)
    ensure_debian_packages(("dpkg",))
    assert commands == ["dpkg-query"]


def test_without_root_the_command_to_run_is_named(monkeypatch):
    monkeypatch.setattr(packages, "missing_debian_packages", lambda names: ["b", "c"])
    monkeypatch.setattr(packages.os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match=r"run: sudo apt-get install -y -q b c$"):
        ensure_debian_packages(("a", "b", "c"))


def test_as_root_apt_updates_then_installs_only_what_is_missing(monkeypatch):
    calls = []
    monkeypatch.setattr(packages, "missing_debian_packages", lambda names: ["c"])
    monkeypatch.setattr(packages.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        packages.subprocess, "run", lambda command, **kw: calls.append((command, kw))
    )
    ensure_debian_packages(("a", "c"))
    (update, update_kw), (install, install_kw) = calls
    assert update == ["apt-get", "update", "-q"] and update_kw["check"]
    assert install == ["apt-get", "install", "-y", "-q", "c"] and install_kw["check"]
    assert install_kw["env"]["DEBIAN_FRONTEND"] == "noninteractive"
