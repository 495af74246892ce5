#!/bin/sh
# examples/fashion_mnist unchanged under mpirun: a short run (1 epoch on 2000 images for the
# MLP, 1200 for the CNN) succeeds, learns (test accuracy above 0.4, chance is 0.1), only rank 0
# prints progress (one "epoch 1:" line, not one per rank) and writes the checkpoint and the
# TensorBoard events (--logdir: one event file, the other ranks' writers write nothing).
# Skipped (77) without Debian's dataset-fashion-mnist.
# Usage: test_example_mpi.sh FASHION_MNIST NP MODEL MPIRUN [MPIRUN ARGS...]
exe=$1 np=$2 model=$3
shift 3
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || exit 77
limit=2000
[ "$model" = cnn ] && limit=1200
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
timeout 240 "$@" -np "$np" "$exe" --model "$model" --epochs 1 --limit "$limit" --batch 60 \
    --checkpoint "$dir/m.safetensors" --logdir "$dir/runs" >"$dir/out" 2>&1
rc=$?
cat "$dir/out"
[ "$rc" -eq 0 ] || { echo "FAIL: exit status $rc"; exit 1; }
[ "$(grep -c '^epoch 1:' "$dir/out")" -eq 1 ] || { echo "FAIL: expected one 'epoch 1:' line (rank 0's)"; exit 1; }
grep -q "kiln: $model on Fashion-MNIST" "$dir/out" || { echo "FAIL: not the $model model"; exit 1; }
grep -q "kiln: $np ranks (MPI)" "$dir/out" || { echo "FAIL: no '$np ranks' line"; exit 1; }
acc=$(sed -n 's/^epoch 1:.*test accuracy \([0-9.]*\).*/\1/p' "$dir/out")
awk -v a="$acc" 'BEGIN { exit !(a > 0.4) }' || { echo "FAIL: test accuracy '$acc' is not above 0.4"; exit 1; }
[ -f "$dir/m.safetensors" ] || { echo "FAIL: no checkpoint"; exit 1; }
[ "$(ls "$dir/runs" | grep -c '^events\.out\.tfevents\.')" -eq 1 ] || { echo "FAIL: expected one event file (rank 0's)"; ls "$dir/runs"; exit 1; }
grep -q "test/accuracy" "$dir/runs"/events.out.tfevents.* || { echo "FAIL: no test/accuracy event"; exit 1; }
echo "ok"
