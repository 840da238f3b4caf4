#!/usr/bin/env bash
# LibreTranslate 1.9.6 in a virtual environment of its own, bench/peers/.venv, for
# `python -m bench.peers`; never among the project's dependencies. From PyPI only; where a
# dependency wants torch, the CPU wheel on this machine (/opt/wheels), never a CUDA one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
torch_wheel=$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n 1 || true)
constraints="$venv/constraints.txt"
if [ -n "$torch_wheel" ]; then
    echo "torch==2.13.0+cpu" > "$constraints"
else
    : > "$constraints"  # no CPU wheel here (LibreTranslate 1.9.6 and spaCy need no torch)
fi
# spaCy: the sentence splitter argos loads from the package (a blank pipeline, no download);
# rich below 13 keeps flask-limiter's pin once spaCy's command line has come in
"${pip[@]}" install --quiet --find-links /opt/wheels -c "$constraints" \
    libretranslate==1.9.6 "spacy>=3.7,<3.9" "numpy<2" "rich>=12,<13"
"${pip[@]}" check
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
    "$venv/bin/python" -c "import torch; assert '+cpu' in torch.__version__, torch.__version__"
fi
"$venv/bin/python" -c "import libretranslate, argostranslate, spacy; print('libretranslate ready')"
