#!/bin/sh
# A rank that fails mid-step never leaves the others hanging: for each way rank 1 can fail
# (tests/dist_fail_worker.c), the job ends non-zero well within the time limit and says why.
# Usage: test_dist_fail.sh WORKER NP MPIRUN [MPIRUN ARGS...]
worker=$1 np=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0
run() { # mode, limit, expected text
    mode=$1 limit=$2 text=$3
    start=$(date +%s)
    KILN_DIST_TIMEOUT=3 timeout "$limit" $mpirun -np "$np" "$worker" "$mode" >"$out" 2>&1
    rc=$? took=$(( $(date +%s) - start ))
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "FAIL $mode: exit status $rc after ${took}s (0: the failure went unseen; 124: a hang)"; cat "$out"; fail=1
    elif ! grep -q "$text" "$out"; then
        echo "FAIL $mode: exit status $rc but no '$text' in:"; cat "$out"; fail=1
    else
        echo "ok   $mode: exit status $rc after ${took}s"
    fi
}
mpirun="$*"
run poison 60 "rank 0: step 2 failed: .*rank 1 failed"
run exit 60 "exited with non-zero status"
run hang 60 "no answer from the other ranks"
exit $fail
