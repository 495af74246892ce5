#!/usr/bin/env bash
# Builds kiln in Release and runs the sentence-embedding example with any arguments given, e.g.
#   scripts/run-embed.sh "A man is eating food." "A man is eating a piece of bread."
#   scripts/run-embed.sh --file sentences.txt --out embeddings.safetensors
# The model is all-MiniLM-L6-v2 as scripts/setup-debian.sh installs it under build-deps/
# (or --model DIR, or KILN_MINILM_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$(nproc)" --target embed >/dev/null
exec ./build-release/examples/embed "$@"
