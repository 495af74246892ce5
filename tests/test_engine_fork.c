/* fork() while kiln's engine and intra-op threads are busy: the parent's work queued before
 * the fork is finished in the child's copy, and the child runs kiln (at dispatch, with its own
 * intra-op threads) without hanging; the parent goes on asynchronously. Each child is guarded
 * by a watchdog so that a hang fails the test instead of stalling it. */
#include <kiln.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln_test.h"

#define N 128

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define ROUNDS 5 /* each fork under ThreadSanitizer costs seconds */
#else
#define ROUNDS 40
#endif

static atomic_bool stop;

/* gcc 12's AddressSanitizer runtime is not fork-safe: a child forked while another thread is
 * inside its allocator (a malloc refilling a size class, or any free recycling its quarantine)
 * inherits that class's lock held and waits forever at its own next malloc of the class (gdb in
 * hung children: 2 of 75 runs, in kiln's posix_memalign and in oneDNN's). LLVM's runtime takes
 * its allocator's locks across fork since release 17. Under it, the busy thread queues each
 * iteration under busy_lock, which the main thread holds across fork: the fork still happens
 * with that work queued and running (kiln's own handlers drain it), but not mid-malloc on the
 * busy thread. Elsewhere the thread never pauses. */
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define PAUSE_AROUND_FORK 1
#else
#define PAUSE_AROUND_FORK 0
#endif
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;

/* A second thread keeps the engine and the intra-op pool busy while the main thread forks. */
static void *keep_busy(void *arg) {
    (void)arg;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, N), 3);
    while (!atomic_load(&stop)) {
        if (PAUSE_AROUND_FORK) pthread_mutex_lock(&busy_lock);
        kiln_tensor y = kiln_exp(kiln_matmul(kiln_ref(x), kiln_ref(x)));
        kiln_release(kiln_sum(y));
        if (PAUSE_AROUND_FORK) pthread_mutex_unlock(&busy_lock);
    }
    kiln_release(x);
    kiln_sync();
    return NULL;
}

/* The child: reads what the parent queued before fork, computes more, exits 0 if all is right. */
static int child_main(kiln_tensor queued) {
    alarm(30);
    float v;
    if (kiln_into_scalar(queued, &v) != KILN_OK || v != (float)N * N * N) return 10;
    kiln_tensor a = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N, N));
    kiln_tensor s = kiln_sum(kiln_matmul(kiln_ref(a), a));
    if (kiln_into_scalar(s, &v) != KILN_OK || v != (float)N * N * N) return 11;
    /* a bad op still reports, and sync still returns */
    kiln_tensor bad = kiln_reshape(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(3));
    kiln_release(bad);
    if (kiln_sync() != KILN_ERR_SHAPE) return 12;
    if (kiln_sync_all() != KILN_OK) return 13;
    return 0;
}

KT_TEST(fork_while_busy_then_use_kiln_in_child) {
    pthread_t th;
    atomic_store(&stop, false);
    KT_CHECK(pthread_create(&th, NULL, keep_busy, NULL) == 0);
    for (int round = 0; round < ROUNDS; round++) {
        kiln_tensor ones = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N, N));
        kiln_tensor queued = kiln_sum(kiln_matmul(kiln_ref(ones), ones)); /* likely still running */
        fflush(NULL);
        if (PAUSE_AROUND_FORK) pthread_mutex_lock(&busy_lock);
        pid_t pid = fork();
        if (pid == 0) _exit(child_main(queued));
        if (PAUSE_AROUND_FORK) pthread_mutex_unlock(&busy_lock);
        KT_CHECK(pid >= 0);
        int status = 0;
        KT_CHECK(waitpid(pid, &status, 0) == pid);
        KT_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d: child %s %d", round,
                     WIFEXITED(status) ? "exited with" : "killed by signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        /* the parent's own copy of the work is unaffected */
        float v;
        KT_CHECK(kiln_into_scalar(queued, &v) == KILN_OK);
        KT_NEAR(v, (double)N * N * N, 0);
    }
    atomic_store(&stop, true);
    pthread_join(th, NULL);
    KT_CHECK(kiln_sync_all() == KILN_OK);
}

int main(void) {
    KT_RUN(fork_while_busy_then_use_kiln_in_child);
    return kt_finish();
}
