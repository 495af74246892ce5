#!/usr/bin/env bash
# Makes the benchmark peers: PyTorch 2.x, NumPy, sentence-transformers and ONNX Runtime (the embedding
# workloads' peer) from PyPI in a virtual environment at bench/.venv (ignored by git), the
# PyTorch a user installs today; bench/run uses it first and Debian's python3-torch
# (apt-get install python3-torch) as a second column. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
if ! python3 -c "import venv, ensurepip" 2>/dev/null; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get install -y -qq python3-venv
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -c "import torch, numpy" 2>/dev/null || .venv/bin/pip install -q torch numpy
# the embedding workloads' peer: all-MiniLM-L6-v2 as its users run it
.venv/bin/python -c "import sentence_transformers" 2>/dev/null || .venv/bin/pip install -q sentence-transformers
# ONNX Runtime, #29's peer of the embed rows: the model exported with torch.onnx.export (which
# needs onnx and onnxscript) and run by onnxruntime, f32 and its int8 dynamic quantization
.venv/bin/python -c "import onnxruntime, onnx, onnxscript" 2>/dev/null || .venv/bin/pip install -q onnxruntime onnx onnxscript
.venv/bin/python -c "import torch, numpy, sentence_transformers as st, onnxruntime as ort
print('PyTorch', torch.__version__, 'NumPy', numpy.__version__, 'sentence-transformers', st.__version__,
      'ONNX Runtime', ort.__version__)"
