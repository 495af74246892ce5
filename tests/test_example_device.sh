#!/bin/sh
# examples/fashion_mnist trains its MLP (or, with --model cnn, its CNN) on the OpenCL device: a
# few batches (--limit) give the same loss trajectory and test accuracy as on the CPU, within
# tolerance. Skipped (exit 77) without the dataset or without an OpenCL device.
# Usage: test_example_device.sh PATH-TO-fashion_mnist [--model cnn]
set -u
exe=$1
shift
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "no Fashion-MNIST in $data: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
args="--limit 1280 --epochs 2 --workers 1 --seed 3 --checkpoint $dir/x.safetensors"
# the CNN: two batches, one epoch (the device's direct conv kernels are slow on PoCL)
[ "$*" = "--model cnn" ] && args="--model cnn --limit 256 --epochs 1 --workers 1 --seed 3 --checkpoint $dir/x.safetensors"
"$exe" $args --device cpu >cpu.txt 2>&1 || { echo "FAIL: the CPU run failed"; cat cpu.txt; exit 1; }
"$exe" $args --device opencl >dev.txt 2>&1
st=$?
if [ $st != 0 ] && grep -q "not available" dev.txt; then echo "no OpenCL device: skipped"; exit 77; fi
[ $st = 0 ] || { echo "FAIL: the OpenCL run failed ($st)"; cat dev.txt; exit 1; }
# "epoch E batch B/N loss L acc A ..." and "test accuracy T": the numbers side by side
extract() { sed -n 's/.*batch \([0-9]*\/[0-9]*\) loss \([0-9.]*\) acc \([0-9.]*\).*/\1 \2 \3/p; s/.*test accuracy \([0-9.]*\).*/test \1/p' "$1"; }
extract cpu.txt >cpu.num
extract dev.txt >dev.num
[ -s cpu.num ] || { echo "FAIL: no losses in the CPU output"; cat cpu.txt; exit 1; }
paste cpu.num dev.num | awk '
    { n = NF / 2; for (i = 2; i <= n; i++) { d = $i - $(i + n); if (d < 0) d = -d; if (d > 2e-3) { bad = 1; print "FAIL:", $0 } } }
    END { exit bad }' || exit 1
echo "ok: the OpenCL device matches the CPU:"; paste cpu.num dev.num
