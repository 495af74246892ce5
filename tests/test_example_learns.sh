#!/bin/sh
# An example program (examples/char_lstm, transformer_classifier, autoencoder) trains for a few
# steps and its loss falls: the last "step N loss X" line it prints must be below FRACTION of
# the first. A bad --steps value exits 2 with a usage line, before training; with HELP given
# (every example but fashion_mnist and embed, tested on their own), --help prints the usage line to
# stdout and exits 0.
# Usage: test_example_learns.sh EXE STEPS FRACTION [HELP]
set -u
exe=$1 steps=$2 fraction=$3 help=${4:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for bad in "--steps abc" "--steps 0" "--steps" "--epochs 3"; do
    # shellcheck disable=SC2086
    "$exe" $bad >"$out" 2>&1
    st=$?
    if [ "$st" != 2 ] || ! grep -q "usage:" "$out"; then
        echo "FAIL $exe $bad: exit status $st, not 2 with a usage line:"; cat "$out"; exit 1
    fi
done
if [ -n "$help" ]; then
    "$exe" --help >"$out" 2>/dev/null
    st=$?
    if [ "$st" != 0 ] || ! grep -q "usage:" "$out"; then
        echo "FAIL $exe --help: exit status $st, not 0 with a usage line on stdout:"; cat "$out"; exit 1
    fi
    for bad in "--steps 5 extra" "--steps 99999999999999999999" "--steps -3"; do
        # shellcheck disable=SC2086
        "$exe" $bad >"$out" 2>&1
        st=$?
        if [ "$st" != 2 ] || ! grep -q "usage:" "$out"; then
            echo "FAIL $exe $bad: exit status $st, not 2 with a usage line:"; cat "$out"; exit 1
        fi
    done
fi
if ! "$exe" --steps "$steps" >"$out" 2>&1; then
    echo "FAIL $exe --steps $steps:"; cat "$out"; exit 1
fi
cat "$out"
awk -v f="$fraction" '
    $1 == "step" && $3 == "loss" { if (first == "") first = $4; last = $4 }
    END {
        if (first == "") { print "FAIL: no loss printed"; exit 1 }
        if (!(last < f * first)) { printf "FAIL: loss %s -> %s, not below %s of the first\n", first, last, f; exit 1 }
        printf "ok   loss %s -> %s\n", first, last
    }' "$out"
