#!/usr/bin/env bash
# Instructions per op on the calling thread for bench_dispatch's tiny add, counted by callgrind
# (repeatable whatever else the machine runs, unlike its wall time): everything kiln_add does
# before it returns (argument checks, the call site, stamping and queueing the record, fusion's
# join of it into the waiting group), and the part of it that records the caller's file:line.
# Three settings: default, KILN_FUSION=0, and the profiler on (KILN_PROFILE); then Python's
# pattern from C (bench_dispatch --drop: kiln_release(kiln_add(kiln_ref(x), kiln_ref(y))), a new
# output made and freed per op), counting the three calls.
#   bench/dispatch_instructions.sh [build-release/bench]
set -euo pipefail
dir=${1:-build-release/bench}
prog="$dir/bench_dispatch"
[ -x "$prog" ] || { echo "no $prog (cmake -DKILN_BUILD_BENCH=ON)"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)"; exit 2; }
runs=5
ops=$(( (runs + 20) * 1000 )) # bench_dispatch: 20 warm-up batches + runs, 1000 adds each
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # label env...
    local label=$1
    shift
    env "$@" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" --toggle-collect='kiln_add' \
        "$prog" --runs "$runs" >/dev/null 2>"$tmp/log"
    local total site
    total=$(callgrind_annotate "$tmp/cg" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    # kiln_add's own instructions: the call-site wrapper (KILN__AT), before the op proper
    site=$(callgrind_annotate "$tmp/cg" | awk '/:kiln_add |:kiln__add_at / {gsub(",", "", $1); s += $1} END {print s + 0}')
    printf '%-28s %6d instructions/op, %4d of them the call site\n' "$label" $((total / ops)) $((site / ops))
}
count_drop() { # label env...
    local label=$1
    shift
    env "$@" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" --toggle-collect='kiln_add' \
        --toggle-collect='kiln_release' --toggle-collect='kiln_ref' "$prog" --drop --runs "$runs" >/dev/null 2>"$tmp/log"
    local total
    total=$(callgrind_annotate "$tmp/cg" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    printf '%-28s %6d instructions/op (ref, add, release)\n' "$label" $((total / ops))
}
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(date -u '+%Y-%m-%d %H:%M UTC')"
count "default" KILN_DUMMY=1
count "KILN_FUSION=0" KILN_FUSION=0
count "profiler on (KILN_PROFILE)" KILN_PROFILE="$tmp/trace.json"
count_drop "--drop (Python's x + y)" KILN_DUMMY=1
count_drop "--drop, KILN_FUSION=0" KILN_FUSION=0
