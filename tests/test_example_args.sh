#!/bin/sh
# examples/fashion_mnist rejects a bad option with exit status 2 and a message naming it, before
# loading anything (it is given a data directory that does not exist, so an option it wrongly
# accepted would end in "cannot open", status 1, and print nothing to stdout either way);
# --help prints the options and exits 0; good values pass on to loading the data.
# Usage: test_example_args.sh PATH-TO-fashion_mnist
set -u
exe=$1
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
failed=0
nodata=/nonexistent/fashion-mnist

# run STATUS NEEDLE ARGS...: exits with STATUS and stderr (or stdout for status 0) has NEEDLE
run() {
    want=$1 needle=$2
    shift 2
    "$exe" "$@" >"$out" 2>"$err"
    got=$?
    where=$err
    [ "$want" = 0 ] && where=$out
    if [ "$got" != "$want" ]; then
        echo "FAIL $*: exit status $got, not $want"; cat "$err"; failed=1
    elif ! grep -qF -- "$needle" "$where"; then
        echo "FAIL $*: the output does not say '$needle':"; cat "$where"; failed=1
    elif [ "$want" = 2 ] && [ -s "$out" ]; then
        echo "FAIL $*: rejected, but printed to stdout (did it start?):"; cat "$out"; failed=1
    else
        echo "ok   $* -> $got: $(head -n 1 "$where")"
    fi
}

# a bad value: exit 2, the message names the option and the value
bad() {
    opt=$1 value=$2
    run 2 "$opt: '$value'" --data "$nodata" "$opt" "$value"
}

for v in abc 5x "" -3 0 99999999999999999999 2.5; do bad --epochs "$v"; done
for v in abc 0 -1 1e3 99999999999999999999; do bad --batch "$v"; done
for v in abc 0 -0.1 1e999 nan inf 0.1x; do bad --lr "$v"; done
for v in abc -1 257; do bad --workers "$v"; done
for v in abc 0 -5; do bad --limit "$v"; done
for v in abc -1 99999999999999999999; do bad --seed "$v"; done
bad --model rnn
for v in gpu opencl:99 cuda:x ""; do bad --device "$v"; done

run 2 "--frobnicate" --data "$nodata" --frobnicate
run 2 "'--epochs' requires an argument" --data "$nodata" --epochs
run 2 "unexpected argument 'stray'" --data "$nodata" stray
run 2 "invalid option" --data "$nodata" -x
run 2 "--fusion-ab needs --epochs 2 or more" --data "$nodata" --fusion-ab --epochs 1

"$exe" --help >"$out" 2>"$err"
got=$?
if [ $got != 0 ]; then echo "FAIL --help: exit status $got"; failed=1; fi
for opt in --model --epochs --batch --lr --workers --limit --data --checkpoint --profile --seed --device --bench --fusion-ab --help; do
    grep -qF -- "$opt" "$out" || { echo "FAIL --help does not list $opt"; failed=1; }
done
[ $got = 0 ] && echo "ok   --help -> 0, lists every option"
run 0 "usage:" -h

# every option with a good value is accepted: the program goes on to open the data
run 1 "cannot open Fashion-MNIST in $nodata" --data "$nodata" --model cnn --epochs 3 --batch 64 --lr 0.01 \
    --workers 0 --limit 1000 --seed 7 --checkpoint x.safetensors --profile x.json --bench --fusion-ab
run 1 "cannot open Fashion-MNIST in $nodata" --data="$nodata" --epochs=2 --lr=1e-2 --model=mlp --device=cpu

# --fusion-ab on the real data (where Debian's package is installed): the epochs alternate
# unfused, fused, fused, unfused, each line says which, and the JSON has both sides' times
data=/usr/share/datasets/fashion-mnist
if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
    if "$exe" --bench --fusion-ab --epochs 4 --limit 256 --workers 0 >"$out" 2>"$err" &&
        [ "$(grep -o '^epoch [0-9] ([a-z]*)' "$out" | tr '\n' ' ')" = "epoch 1 (unfused) epoch 2 (fused) epoch 3 (fused) epoch 4 (unfused) " ] &&
        grep -q '"ms":[0-9.]*,"cpu_ms":[0-9.]*,"unfused_ms":[0-9.]*,"unfused_cpu_ms":[0-9.]*' "$out"; then
        echo "ok   --fusion-ab: U F F U, both sides' times"
    else
        echo "FAIL --fusion-ab:"; cat "$out" "$err"; failed=1
    fi
fi
exit $failed
