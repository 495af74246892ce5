#!/usr/bin/env bash
# Builds kiln in Release and runs the Fashion-MNIST example with any arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$(nproc)" --target fashion_mnist >/dev/null
exec ./build-release/examples/fashion_mnist "$@"
