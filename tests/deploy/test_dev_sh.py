"""`./dev.sh` chooses the GPU set-up where nvidia-smi lists a GPU: the dev.sh functions are
run from a sourced dev.sh with a fake `nvidia-smi` on PATH and a fake Python that records
the pip commands instead of running them."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import ROOT

H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0f2e5c1a)"
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$PIP_LOG"
case "$*" in
  "-c "*) echo "$FAKE_SITE" ;;  # the purelib query: a folder without nvidia wheels
  "-m pip show -q "*) case " $INSTALLED " in *" $5 "*) exit 0 ;; *) exit 1 ;; esac ;;
esac
"""


def _dev_sh(tmp_path, nvidia_smi: str | None, installed: str = "", device: str = "") -> dict:
    """Runs install_python_packages and export_variants of a sourced dev.sh; returns the
    Python commands it ran and the variants it would export."""
    bin_dir, log = tmp_path / "bin", tmp_path / "pip.log"
    bin_dir.mkdir(exist_ok=True)
    log.write_text("")
    (tmp_path / "site").mkdir(exist_ok=True)
    python = bin_dir / "fake-python"
    python.write_text(FAKE_PYTHON)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(nvidia_smi if nvidia_smi is not None else "#!/bin/sh\nexit 127\n")
    for script in (python, smi):
        script.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": str(python),
        "PIP_LOG": str(log),
        "FAKE_SITE": str(tmp_path / "site"),
        "INSTALLED": installed,
        "ATTNSERVE_DEVICE": device,
    }
    script = 'source "$1" && install_python_packages && export_variants'
    done = subprocess.run(
        ["bash", "-c", script, "bash", str(ROOT / "dev.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return {"commands": log.read_text().splitlines(), "variants": done.stdout.strip()}


@pytest.fixture
def dev_sh(tmp_path):
    return lambda *args, **kwargs: _dev_sh(tmp_path, *args, **kwargs)


def _installs(commands: list[str]) -> list[str]:
    return [c for c in commands if c.startswith("-m pip install")]


def test_a_gpu_gets_onnxruntime_gpu_with_cuda_wheels_and_fp16_graphs(dev_sh):
    run = dev_sh(f"#!/bin/sh\necho '{H100}'\n", installed="onnxruntime numpy")
    assert "-m pip uninstall -y -q onnxruntime" in run["commands"]
    (install,) = _installs(run["commands"])
    assert install.endswith("-e .[gpu,client,train,hf,ray,bench,dev] onnxruntime-gpu[cuda,cudnn]")
    assert run["commands"].index("-m pip uninstall -y -q onnxruntime") < run["commands"].index(
        install
    )
    assert run["variants"] == "fp32,int8,fp16"

    again = dev_sh(f"#!/bin/sh\necho '{H100}'\n", installed="onnxruntime-gpu")
    assert not [c for c in again["commands"] if "uninstall" in c]  # nothing to remove


@pytest.mark.parametrize(
    "nvidia_smi",
    [
        None,  # no nvidia-smi
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the "
        "NVIDIA driver.'\nexit 9\n",
        "#!/bin/sh\necho 'No devices found.'\nexit 6\n",
    ],
    ids=["no-nvidia-smi", "no-driver", "no-device"],
)
def test_without_a_gpu_nothing_changes(dev_sh, nvidia_smi):
    run = dev_sh(nvidia_smi, installed="onnxruntime")
    assert not [c for c in run["commands"] if "uninstall" in c]
    (install,) = _installs(run["commands"])
    assert install.endswith("-e .[serve,client,train,hf,ray,bench,dev]")
    assert run["variants"] == "fp32,int8"


def test_attnserve_device_cpu_keeps_the_cpu_set_up_on_a_gpu(dev_sh):
    run = dev_sh(f"#!/bin/sh\necho '{H100}'\n", installed="onnxruntime-gpu", device="cpu")
    assert "-m pip uninstall -y -q onnxruntime-gpu" in run["commands"]
    (install,) = _installs(run["commands"])
    assert install.endswith("-e .[serve,client,train,hf,ray,bench,dev]")
    assert run["variants"] == "fp32,int8"


@pytest.mark.parametrize(
    ("given", "expected"), [("", "fp32,int8"), ("fp32,int8,fp16", "fp32,int8,fp16")]
)
def test_the_repository_s_variants_can_be_named_for_an_image_built_elsewhere(given, expected):
    """`ATTNSERVE_EXPORT_VARIANTS` names the variants `./dev.sh repository` exports (fp16 for
    the CUDA image on a host without a GPU); unset, the host decides (no GPU here)."""
    done = subprocess.run(
        [
            "bash",
            "-c",
            'source "$1" && gpu_present() { return 1; } && export_variants',
            "bash",
            str(ROOT / "dev.sh"),
        ],
        env={"PATH": "/usr/bin:/bin", "ATTNSERVE_EXPORT_VARIANTS": given},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_the_graphs_revision_dev_sh_compares_is_the_builders():
    """A version is rebuilt when its manifest's graphs_revision is not the builder's: dev.sh
    reads it from export/builder.py's line without importing the builder (and torch)."""
    pytest.importorskip("torch")
    from export.builder import REVISION

    done = subprocess.run(
        ["bash", "-c", 'source "$1" && graphs_revision', "bash", str(ROOT / "dev.sh")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(REVISION)
