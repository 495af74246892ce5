/* The exit guard: no kernel runs while exit() tears down the libraries kernels call.
 *
 * exit() (and a return from main) runs its handlers newest first, and oneDNN registers its
 * static objects' destructors lazily, from a kernel's thread, the first time a code path runs:
 * an atexit handler of kiln's, however late it registers, can still come before them, and
 * a kernel then runs into destroyed state (a worker inside dnnl_sgemm while the main thread is
 * in oneDNN's destructors). One thing runs before every atexit handler: the exiting thread's
 * own thread_local destructors (glibc's exit() calls __call_tls_dtors first). So each thread
 * that uses kiln, and the thread that loads it (main, by a constructor), registers one with
 * __cxa_thread_atexit_impl that takes the kernel gate's exit hold: new kernels wait, running
 * ones get a few seconds. That covers a return from main and exit() from any thread that used
 * kiln; a thread that never did still has the atexit handler (backend-impl.h) as a fallback.
 *
 * The same destructor runs when a thread merely ends. Then a pthread key destructor, which
 * exit() never runs, releases the hold right after; its key is created first (in the
 * constructor), so it runs before kiln's other key destructors, which may wait for kernels.
 * A thread's end therefore waits for the kernels running at that moment (not for queued work). */
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/engine-async.h"

#if defined(__GLIBC__)
/* glibc's registration of a thread_local destructor (what C++'s thread_local uses). */
extern int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso_symbol) __attribute__((weak));
#define HAVE_THREAD_EXIT_HOOK 1
#else
#define HAVE_THREAD_EXIT_HOOK 0
#endif

static pthread_key_t thread_gone_key;
static bool have_key;
static _Thread_local bool guarded;

/* The main thread ending is the process ending (a return from main; pthread_exit there is
 * rare and only waits longer): devices quiesce too, before any atexit handler. */
static void thread_ending(void *unused) {
    (void)unused;
    if ((pid_t)syscall(SYS_gettid) == getpid()) kiln__kernels_stop_at_exit();
    else kiln__kernels_hold_for_exit();
}

static void thread_gone(void *unused) {
    (void)unused;
    kiln__kernels_release_thread_exit();
}

void kiln__exit_guard_thread(void) {
    if (guarded) return;
    guarded = true;
#if HAVE_THREAD_EXIT_HOOK
    if (!have_key || !__cxa_thread_atexit_impl) return;
    if (pthread_setspecific(thread_gone_key, &guarded) != 0) return;
    if (__cxa_thread_atexit_impl(thread_ending, NULL, &have_key) != 0)
        pthread_setspecific(thread_gone_key, NULL);
#endif
}

__attribute__((constructor)) static void exit_guard_init(void) {
    have_key = pthread_key_create(&thread_gone_key, thread_gone) == 0;
    kiln__exit_guard_thread();
}
