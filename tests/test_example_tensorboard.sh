#!/bin/sh
# examples/fashion_mnist --logdir DIR: a short run writes one TensorBoard event file in DIR with
# the step scalars and the epoch's histograms in it; a log directory that cannot be created is
# reported (naming kiln_summary_writer_open and the line) and training still ends normally.
# Skipped (77) without Debian's dataset-fashion-mnist.
# Usage: test_example_tensorboard.sh PATH-TO-fashion_mnist
set -u
exe=$1
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no Fashion-MNIST in $data"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }

"$exe" --epochs 1 --limit 1024 --workers 0 --logdir "$tmp/runs/a" --checkpoint "$tmp/c.safetensors" >"$tmp/out" 2>"$tmp/err" ||
    { fail "the run with --logdir failed:"; cat "$tmp/err"; }
n=$(ls "$tmp/runs/a" | grep -c '^events\.out\.tfevents\.')
[ "$n" = 1 ] || fail "$n event files in $tmp/runs/a, expected 1"
for tag in train/loss train/lr time/step_ms train/accuracy test/accuracy weights/1.weight grads/1.weight config; do
    grep -qF "$tag" "$tmp/runs/a"/events.out.tfevents.* || fail "no event tagged $tag"
done
grep -qF "TensorBoard events in $tmp/runs/a/events.out.tfevents." "$tmp/out" || fail "the file is not named on stdout"

: >"$tmp/file"
"$exe" --epochs 1 --limit 256 --workers 0 --logdir "$tmp/file/runs" --checkpoint "$tmp/c.safetensors" >"$tmp/out" 2>"$tmp/err" ||
    { fail "an unwritable --logdir stopped training:"; cat "$tmp/err"; }
grep -q "tensorboard: kiln_summary_writer_open at .*fashion_mnist.c:[0-9]*: cannot create the log directory" "$tmp/err" ||
    { fail "no clear message for an unwritable --logdir:"; cat "$tmp/err"; }
grep -qF "test accuracy" "$tmp/out" || fail "training did not go on after the logging error"
[ "$failed" = 0 ] && echo "ok   fashion_mnist --logdir"
exit "$failed"
