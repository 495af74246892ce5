#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and run kiln (python3 runs
# the checkpoint test's safetensors reference reader; bench/run needs it too; libclang-rt
# holds libFuzzer for the fuzz step).
# Run as root (or with sudo available). Safe to run again.
set -euo pipefail
packages=(build-essential cmake clang libclang-rt-14-dev pkg-config libopenblas-dev zlib1g-dev dataset-fashion-mnist python3)
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
