#!/bin/sh
# A kiln call with the wrong number of arguments must not compile, and the compiler's first
# error must name the caller's file:line (not a line inside kiln's headers).
# Usage: test_call_site_arity.sh C-COMPILER INCLUDE-DIR
set -u
cc=$1 inc=$2
src=$(dirname "$0")/call_site_wrong_arity.c
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0

# the right calls compile, so a failure below comes from the wrong one
if ! $cc -std=c11 -fsyntax-only -I"$inc" "$src" >"$out" 2>&1; then
    echo "FAIL: $src does not compile without a wrong call:"; cat "$out"; exit 1
fi
for case in TOO_MANY TOO_FEW NONE_EXPECTED; do
    line=$(grep -n "case $case \*/" "$src" | cut -d: -f1)
    if $cc -std=c11 -fsyntax-only -I"$inc" -DKILN_WRONG_$case "$src" >"$out" 2>&1; then
        echo "FAIL $case: compiled"; failed=1; continue
    fi
    first=$(grep -m1 "error" "$out")
    case "$first" in
        *call_site_wrong_arity.c:$line:*) echo "ok   $case: $first" ;;
        *) echo "FAIL $case: the first error does not name call_site_wrong_arity.c:$line:"; cat "$out"; failed=1 ;;
    esac
done
exit $failed
