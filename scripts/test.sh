#!/usr/bin/env bash
# Checks the layer order of src/'s includes, compiles the code examples of the headers and
# README, builds kiln and runs every test: a
# warnings-as-errors Release build with gcc (then installed in three layouts, each used through
# pkg-config) and with clang, then the whole suite under AddressSanitizer +
# UndefinedBehaviorSanitizer, then the engine and dist tests under ThreadSanitizer, then the file
# readers' libFuzzer targets for a short while each. Build trees go to build-test/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
root=build-test

build() { # name compiler extra-cmake-args...
    local name=$1 cc=$2
    shift 2
    cmake -S . -B "$root/$name" -DCMAKE_C_COMPILER="$cc" -DKILN_WERROR=ON -DKILN_BUILD_BENCH=OFF \
        -DKILN_TEST_OPENCL_CACHE="$PWD/$root/opencl-cache" "$@" >/dev/null
    cmake --build "$root/$name" -j "$jobs" >"$root/$name.log" 2>&1 || { cat "$root/$name.log"; exit 1; }
}

# each phase's start, in seconds since the script began, and the disk left: where CI's 25 minutes
# and its disk go
phase() { echo "== $1 (at ${SECONDS}s, $(df -h --output=avail . | tail -n 1 | tr -d ' ') free)"; }

# A build tree no later phase reads is removed once its phase passed: the ASan tree alone is ~4 GB
# (debug info in ~130 test programs) and CI once ran out of disk linking the TSan tree. A phase
# that fails exits before this, so its tree stays for a look.
done_with() { rm -rf "${@/#/$root/}"; }

mkdir -p "$root"
phase "layers: no include in src/ points to a higher layer (README's Layout table)"
python3 scripts/check_layers.py src

phase "code examples in include/kiln/*.h and README.md compile"
scripts/check_examples.py

phase "gcc Release"
build gcc gcc -DCMAKE_BUILD_TYPE=Release
(cd "$root/gcc" && ctest -j "$jobs" --output-on-failure)

phase "install + pkg-config: README's example against the installed library"
# a private prefix (moved after installing), /usr and /usr/local (staged with DESTDIR)
scripts/check_install.sh "$root/gcc" "$root/install"

phase "clang Release: the same suite (a call spanning lines, a NaN's sign: where compilers differ)"
build clang clang -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON
(cd "$root/clang" && ctest -j "$jobs" --output-on-failure)
done_with clang

phase "AddressSanitizer + UndefinedBehaviorSanitizer"
build asan gcc -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=address
opencl_tests='opencl|example_device'
(cd "$root/asan" && KILN_NO_CACHING=1 ctest -j "$jobs" --output-on-failure -E "$opencl_tests")
# The OpenCL tests may run a second time if the first fails: LeakSanitizer's exit-time tracer
# now and then segfaults while PoCL's threads wind down ("Tracer caught signal 11", after every
# check passed; a sanitizer runtime bug, google/sanitizers#1353). A real failure fails twice.
(cd "$root/asan" && KILN_NO_CACHING=1 ctest -j "$jobs" --output-on-failure -R "$opencl_tests" --repeat until-pass:2)
done_with asan

# (the *_sync twins set KILN_SYNC=1 themselves, the OpenCL ones KILN_FUSION=0 too: in these two
# phases they would mostly repeat the runs the gcc phase made; 23 tests, ~90 s of test time a phase)
phase "synchronous engine (KILN_SYNC=1): the same suite, every op run at dispatch"
(cd "$root/gcc" && KILN_SYNC=1 ctest -j "$jobs" --output-on-failure -E '_sync$')

phase "fusion off (KILN_FUSION=0): the same suite, every op run on its own"
(cd "$root/gcc" && KILN_FUSION=0 ctest -j "$jobs" --output-on-failure -E '_sync$')

phase "low precision without AVX512-BF16 (KILN_ISA=avx2): bf16/f16 products, convs and autocast widened to f32"
(cd "$root/gcc" && KILN_ISA=avx2 ctest -j "$jobs" --output-on-failure -R '^test_(gemm_lowp|lowp_ops|autocast|grad_scaler|conv_lowp)$')
done_with gcc

phase "ThreadSanitizer (engine tests, dist tests as 2 ranks)"
# (OpenBLAS's threads and oneDNN's OpenMP runtime synchronise in ways TSan cannot see: libgomp is not
# instrumented, so its team hand-offs show as races; use the built-in GEMM and convolution here)
build tsan clang -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=thread -DKILN_USE_BLAS=OFF -DKILN_USE_DNNL=OFF
(cd "$root/tsan" && KILN_NO_CACHING=1 TSAN_OPTIONS=halt_on_error=1 ctest -j "$jobs" --output-on-failure -L engine)
# the collectives and the data-parallel wrapper as 2 ranks (35-60 s on 2 loaded cores); Open
# MPI's one lock-order report in MPI_Init is suppressed by tests/tsan-mpi.supp (the tests' env)
# (and data parallelism's unused parameters, accumulation and failure paths, a few seconds more)
(cd "$root/tsan" && KILN_NO_CACHING=1 ctest --output-on-failure -R '^test_dist(_ddp|_train|_ddp_unused|_ddp_accum|_ddp_errors)?_np2$')
done_with tsan

phase "Python package: pytest against kiln built by pip into .venv-py (scripts/setup-debian.sh)"
# (pytest's exit status 5 means it collected no test: a broken install, so it fails CI too)
if [ -x .venv-py/bin/python ]; then
    .venv-py/bin/pip install -q --no-build-isolation ./python >"$root/python-install.log" 2>&1 ||
        { cat "$root/python-install.log"; exit 1; }
    rc=0
    # (KILN_TUNE=0: the GEMM rules, not a measurement, as for the C tests: deterministic, nothing
    # written to ~/.cache; tests/test_tune.c tests the tuner)
    (cd python/tests && KILN_TUNE=0 KILN_HYPOTHESIS_SECONDS=${KILN_HYPOTHESIS_SECONDS:-20} ../../.venv-py/bin/python -m pytest -q -p no:cacheprovider .) || rc=$?
    [ "$rc" -ne 5 ] || echo "pytest collected no test in python/tests: the package or its tests did not import"
    [ "$rc" -eq 0 ] || exit 1
else
    echo "no .venv-py: run scripts/setup-debian.sh to build and test the Python package"; exit 1
fi

phase "fuzzers (libFuzzer + ASan + UBSan): each file reader, the tokenizer and the config.json reader on mutations of kiln's own seeds"
# KILN_FUZZ_SECONDS per target (default 30; at 45 a fresh-clone .ci/run took 24.5 of CI's 25 minutes at stop 28); a crash, leak or UB report fails CI and leaves
# the input as crash-* in $root/fuzz-work/<target>.
secs=${KILN_FUZZ_SECONDS:-30}
build fuzz clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF
rm -rf "$root/fuzz-seeds" "$root/fuzz-work"
"$root/fuzz/fuzz/make_corpus" "$root/fuzz-seeds"
for target in safetensors idx tokenizer json; do
    mkdir -p "$root/fuzz-work/$target"
    (cd "$root/fuzz-work/$target" &&
        "../../fuzz/fuzz/fuzz_$target" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 \
            . "../../fuzz-seeds/$target" 2>"../$target.log") ||
        { tail -n 60 "$root/fuzz-work/$target.log"; echo "fuzz_$target found a crash"; exit 1; }
    tail -n 1 "$root/fuzz-work/$target.log"
done
echo "== all passed in ${SECONDS}s"
