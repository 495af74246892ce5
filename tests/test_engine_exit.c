/* A program may return from main (or call exit) with work still queued: the exit must not
 * crash. Kernels still running when exit() starts tearing down the libraries they call (oneDNN
 * primitives for convolutions, OpenBLAS for GEMMs) used to crash there. Each round runs this
 * program again as a child (a fresh process, so its engine is asynchronous, which a forked
 * child's is not) that queues convolutions, GEMMs and elementwise ops and exits at once; the
 * child must exit with status 0 within a time limit. */
#include <kiln.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln_test.h"

#define ROUNDS 12

/* The child: a few layers' worth of queued work, released (not read), then exit. One
 * convolution and one matrix product are read first: oneDNN registers destructors while it
 * creates its first primitive (and its first sgemm kernels), and an exit during that very first
 * creation is still unguarded (the hold can only be registered after it; see
 * kiln__backend_exit_hold_register). */
static int child(int round) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 16, 32, 32), (uint64_t)round);
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(16, 16, 3, 3), 2);
    float first;
    if (kiln_into_scalar(kiln_sum(kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 1, 1, 1, 1, 1)), &first) != KILN_OK)
        return 3;
    for (int i = 0; i < 6; i++)
        x = kiln_relu(kiln_conv2d(x, kiln_ref(w), KILN_NONE, 1, 1, 1, 1, 1, 1, 1));
    kiln_tensor a = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 256), 3);
    /* likewise one product read first: oneDNN makes its sgemm kernels on the first one */
    if (kiln_into_scalar(kiln_sum(kiln_matmul(kiln_ref(a), kiln_ref(a))), &first) != KILN_OK) return 3;
    for (int i = 0; i < 6; i++) a = kiln_tanh(kiln_matmul(a, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 256), 4)));
    kiln_release(x);
    kiln_release(w);
    kiln_release(a);
    if (round % 2) exit(0);
    return 0; /* from main */
}

KT_TEST(exit_with_queued_work) {
    for (int r = 0; r < ROUNDS; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            char arg[16];
            snprintf(arg, sizeof arg, "%d", r);
            alarm(60); /* a hang at exit fails the round */
            execl("/proc/self/exe", "test_engine_exit", "--child", arg, (char *)NULL);
            _exit(127);
        }
        KT_CHECK(pid > 0);
        if (pid <= 0) return;
        int status = 0;
        KT_CHECK(waitpid(pid, &status, 0) == pid);
        KT_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d: child %s %d", r,
                     WIFSIGNALED(status) ? "killed by signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--child") == 0) return child(atoi(argv[2]));
    KT_RUN(exit_with_queued_work);
    return kt_finish();
}
