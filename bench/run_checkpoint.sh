#!/bin/sh
# Issue #28's table: kiln's bench_checkpoint (plain, ckpt, auto, ckpt+auto) and PyTorch's peer
# (plain, ckpt, selective) at the same shape and threads, one process per mode, in alternating
# rounds (a loaded machine moves between rounds more than the modes differ). Prints one JSON line per process.
#   bench/run_checkpoint.sh [BUILD_DIR] [ROUNDS] [extra args for both sides, e.g. --model encoder]
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
ROUNDS=${2:-2}
shift 2 2>/dev/null || shift $#
PY=$ROOT/bench/.venv/bin/python
[ -x "$PY" ] || PY=python3
export KILN_NUM_THREADS=2 OMP_NUM_THREADS=2
# PyTorch's CPU tensors come from malloc: a fixed mmap threshold gives every large one its own
# mapping, returned at free, so the peer's resident set follows its live tensors (glibc's
# dynamic threshold would keep freed blocks in the heap and hide the peak)
PEER_ENV="MALLOC_MMAP_THRESHOLD_=131072"
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    for m in plain ckpt auto ckpt+auto; do "$BUILD/bench/bench_checkpoint" --mode $m --runs 2 "$@"; done
    for m in plain ckpt selective; do env $PEER_ENV "$PY" "$ROOT/bench/peers/torch_checkpoint.py" --mode $m --runs 2 "$@"; done
    r=$((r + 1))
done
