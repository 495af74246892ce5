/* Exit with work still queued, without a first read to warm anything up: a bf16 linear layer, a
 * convolution and an f32 product are queued and released unread, and the program returns from
 * main (or calls exit()) at once. oneDNN registers its static objects' destructors the first
 * time a code path runs, from the kernel's own thread, so exit then met a worker inside
 * dnnl_sgemm while the main thread ran those destructors (about 1 run in 100 crashed). Each
 * round runs this program again as a fresh child (so its engine is asynchronous); every child
 * must exit with status 0.
 *
 * Second case: exit() called by a second thread while the main thread keeps queueing work
 * (a thread that has used kiln; and one that has not, once each kind of work ran once). */
#include <kiln.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln_test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROUNDS 100 /* a sanitized child starts ten times slower */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ROUNDS 100
#endif
#endif
#ifndef ROUNDS
#define ROUNDS 500
#endif
#define THREAD_ROUNDS 40

static void queue_work(int round) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_BF16, KILN_SHAPE(32, 256), (uint64_t)round);
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_BF16, KILN_SHAPE(256, 256), 2);
    kiln_release(kiln_linear(x, w, KILN_NONE));
    kiln_tensor img = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 8, 16, 16), 3);
    kiln_tensor k = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 8, 3, 3), 4);
    kiln_release(kiln_relu(kiln_conv2d(img, k, KILN_NONE, 1, 1, 1, 1, 1, 1, 1)));
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(192, 192), 5);
    kiln_release(kiln_tanh(kiln_matmul(kiln_ref(a), a)));
}

static int child_main_exit(int round) {
    queue_work(round);
    if (round % 2) exit(0);
    return 0; /* from main */
}

typedef struct {
    int round;
    bool use_kiln;
} exiter_arg;

static void *exiter(void *p) {
    const exiter_arg *a = p;
    if (a->use_kiln) kiln_release(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)));
    struct timespec ts = {0, (long)(a->round % 8) * 500000L}; /* 0 to 3.5 ms into the work */
    nanosleep(&ts, NULL);
    exit(0);
}

static int child_thread_exit(int round) {
    static exiter_arg arg;
    arg = (exiter_arg){round, round % 2 == 0};
    /* A thread that never used kiln has only the atexit handler, registered after oneDNN's first
     * use of each code path: it covers work whose paths ran once before (not an exit during a
     * path's very first run: README). */
    if (!arg.use_kiln) {
        queue_work(0);
        if (kiln_sync_all() != KILN_OK) return 3;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, exiter, &arg) != 0) return 3;
    for (int i = 0;; i++) queue_work(i); /* until the other thread's exit() ends the process */
}

/* Runs ROUNDS children with mode "main" or "thread"; every one must exit 0. */
static void run_children(const char *mode, int rounds) {
    int failed = 0;
    for (int r = 0; r < rounds; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            char arg[16];
            snprintf(arg, sizeof arg, "%d", r);
            alarm(60); /* a hang at exit fails the round */
            /* the main thread holds handles in the middle of its work when the other exits */
            if (strcmp(mode, "thread") == 0) unsetenv("KILN_LEAK_CHECK");
            execl("/proc/self/exe", "test_engine_exit_race", mode, arg, (char *)NULL);
            _exit(127);
        }
        KT_CHECK(pid > 0);
        if (pid <= 0) return;
        int status = 0;
        KT_CHECK(waitpid(pid, &status, 0) == pid);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failed++ < 5)
            KT_CHECK_MSG(false, "%s round %d: child %s %d", mode, r,
                         WIFSIGNALED(status) ? "killed by signal" : "exited with",
                         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    KT_CHECK_MSG(failed == 0, "%d of %d %s rounds failed", failed, rounds, mode);
}

KT_TEST(return_with_queued_bf16_conv_gemm) { run_children("main", ROUNDS); }
KT_TEST(exit_from_second_thread_while_work_runs) { run_children("thread", THREAD_ROUNDS); }

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "main") == 0) return child_main_exit(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "thread") == 0) return child_thread_exit(atoi(argv[2]));
    KT_RUN(return_with_queued_bf16_conv_gemm);
    KT_RUN(exit_from_second_thread_while_work_runs);
    return kt_finish();
}
