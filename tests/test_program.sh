#!/bin/sh
# Runs one of the programs of examples/programs (issue 23) briefly in a temporary directory and
# checks that it did what it says, not only that it exited 0:
#   mlp_adamw, char_transformer, custom_dataset: the loss falls (the last "step|epoch N loss X"
#     line below FRACTION of the first); mlp_adamw also splits its 6 parameters 4 / 2;
#   char_transformer: the generated line is "the " and exactly LENGTH more characters;
#   residual_checkpoint: the checkpoint exists and the loaded model's output differs by 0;
#   interop_print: PyTorch's printed text, the same memory through DLPack, an equal reload;
# and that a bad argument exits 2 with a usage line before doing anything.
# Usage: test_program.sh EXE NAME
set -u
exe=$1 name=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
out=$dir/out
fail() { echo "FAIL $name: $1"; cat "$out"; exit 1; }
falls() { # FRACTION: the loss of the last report is below FRACTION of the first
    awk -v f="$1" '
        ($1 == "step" || $1 == "epoch") && $3 == "loss" { if (first == "") first = $4; last = $4 }
        END { if (first == "" || !(last < f * first)) exit 1; printf "ok   loss %s -> %s\n", first, last }' "$out"
}
case $name in
mlp_adamw)
    "$exe" 150 >"$out" 2>&1 || fail "exit status $?"
    falls 0.2 || fail "the loss did not fall below 0.2 of the first"
    grep -q "^4 parameters without weight decay, 2 with$" "$out" || fail "not 4 parameters without decay and 2 with"
    bad=0 ;;
char_transformer)
    "$exe" 150 37 >"$out" 2>&1 || fail "exit status $?"
    falls 0.3 || fail "the loss did not fall below 0.3 of the first"
    text=$(tail -n 1 "$out")
    [ "${#text}" = 41 ] || fail "generated '$text' (${#text} characters), not 'the ' and 37 more"
    case $text in "the "*) ;; *) fail "the generated text does not start with the prompt";; esac
    "$exe" 5 100001 >"$out" 2>&1
    [ $? = 2 ] && grep -q "^usage:" "$out" || fail "a length over 100000 was not refused with a usage line"
    bad=0 ;;
custom_dataset)
    "$exe" 8 >"$out" 2>&1 || fail "exit status $?"
    [ "$(grep -c '^epoch [0-9]* loss' "$out")" = 8 ] || fail "not 8 epochs reported"
    falls 0.5 || fail "the loss did not fall below 0.5 of the first"
    bad=0 ;;
residual_checkpoint)
    "$exe" 20 model.safetensors >"$out" 2>&1 || fail "exit status $?"
    [ -s model.safetensors ] || fail "no checkpoint written"
    grep -q "largest output difference 0$" "$out" || fail "the loaded model's output differs"
    "$exe" 5 "$dir/no/such/dir/x.safetensors" >"$out" 2>&1 && fail "an unwritable checkpoint path succeeded"
    grep -q "kiln_checkpoint_save at .*residual_checkpoint.c:[0-9]*: cannot create" "$out" ||
        fail "an unwritable path was not reported with the call and its line"
    bad=0 ;;
interop_print)
    "$exe" t.safetensors >"$out" 2>&1 || fail "exit status $?"
    expected=$(printf '%s\n' "tensor([[ 3.0000, -4.0000,  7.0000],"  "        [ 9.0000,  1.2500, 13.0000]])" \
        "tensor([0, 1, 2, 3, 4])" "as a string: 74 characters" "y[1][2] read in place: 13" \
        "DLPack: 2 dims, the same memory: yes" "saved to t.safetensors and loaded: equal: yes")
    [ "$(cat "$out")" = "$expected" ] || { echo "expected:"; echo "$expected"; fail "other output"; }
    [ -s t.safetensors ] || fail "no file written"
    "$exe" "$dir/no/such/dir/t.safetensors" >"$out" 2>&1 && fail "an unwritable path succeeded"
    grep -q "interop_print.c:[0-9]*" "$out" || fail "an unwritable path was not reported with the caller's line"
    bad=1 ;;
*) echo "unknown program $name"; exit 1 ;;
esac
if [ "$bad" = 0 ]; then
    for arg in abc 0 -3; do
        "$exe" "$arg" >"$out" 2>&1
        st=$?
        [ "$st" = 2 ] && grep -q "^usage:" "$out" || fail "argument '$arg': exit status $st, not 2 with a usage line"
    done
fi
cat "$out"
echo "ok   $name"
