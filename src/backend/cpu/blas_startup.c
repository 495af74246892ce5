/* OpenBLAS's helper threads at start-up: stopped when the CPU backend starts (#29).
 *
 * Why: the pthread build of OpenBLAS (Debian's libopenblas0-pthread) starts its helper threads
 * when the library is loaded, before main, and each helper then waits for work by spinning
 * (sched_yield in a loop) for 2^28 TSC cycles, about 0.1 s at 2.6 GHz, before it sleeps,
 * whether or not anything calls OpenBLAS. So every kiln program spent its first 0.1 s sharing
 * the cores with a busy thread, even where no product goes to OpenBLAS (f32 products go to
 * oneDNN on AVX-512 CPUs): on 2 cores the 1024 x 1024 product ran at one core's speed,
 * 230 GFLOP/s against 460, until the helper slept, and the whole of bench_matmul (6 products in
 * 30 ms) fell inside that window; with OPENBLAS_THREAD_TIMEOUT=4 (a spin of 16 cycles) the two
 * speeds became one (BENCHMARKS.md, #29's bimodality). That environment variable works only
 * when set before the process starts, so instead kiln stops the helpers with
 * blas_thread_shutdown_, the call OpenBLAS makes itself around a fork; OpenBLAS starts them
 * again at its next threaded call (exec_blas starts the server when it is down), after which
 * they spin and sleep as before, a cost gemm.c's thread budget already accounts for.
 *
 * The shutdown must not race an OpenBLAS call on another thread: kiln makes none before its
 * backend exists, and a program that calls OpenBLAS itself, on other threads, while kiln
 * starts can keep the helpers with KILN_OPENBLAS_STOP_HELPERS=0. Only the pthread build is
 * touched (openblas_get_parallel() == 1): the OpenMP build's helpers are libgomp's, and
 * another CBLAS lacks these symbols, which are weak, so the call is skipped. */
#include "backend/cpu/cpu-impl.h"
#include "core/core-impl.h"

#if KILN_HAVE_CBLAS
#include <cblas.h>

#ifndef OPENBLAS_VERSION
int openblas_get_parallel(void);
#endif
int blas_thread_shutdown_(void);
#pragma weak openblas_get_parallel
#pragma weak blas_thread_shutdown_

#define OPENBLAS_PTHREADS 1 /* openblas_get_parallel()'s answer for the pthread build */

void kiln__openblas_stop_helpers(void) {
    if (!openblas_get_parallel || !blas_thread_shutdown_ || openblas_get_parallel() != OPENBLAS_PTHREADS) return;
    if (!kiln__env_flag("KILN_OPENBLAS_STOP_HELPERS", true)) return;
    (void)blas_thread_shutdown_();
}

#else

void kiln__openblas_stop_helpers(void) {}

#endif
