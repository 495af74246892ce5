/* Exit with work still on the OpenCL device: each child queues device work, reads a later,
 * independent result (so the earlier kernels have been handed to the device but may not have
 * run), and returns from main (or calls exit()) at once. PoCL compiles a kernel's work-group
 * function on its own threads when the kernel first launches, in LLVM, whose static objects
 * exit() destroys: that crashed about 1 child in 8 (segmentation faults) until the exit hold
 * waited for the devices' queues too. Each child gets a fresh PoCL cache (POCL_CACHE_DIR) so
 * that it compiles at launch; kiln's own program cache stays warm. Every child must exit with
 * status 0. Skipped (exit 77) without an OpenCL device. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln_test.h"

#define ROUNDS 8

extern char **environ;

static int child(int round) {
    kiln_tensor x = kiln_randn(KILN_OPENCL, KILN_F32, KILN_SHAPE(1000, 1000), 3);
    kiln_tensor y = kiln_exp(kiln_mul(kiln_ref(x), kiln_sigmoid(kiln_ref(x))));
    kiln_tensor z = kiln_sum(kiln_matmul(kiln_ref(y), kiln_ref(x)));
    float v[7];
    if (kiln_into_data(kiln_tanh(kiln_randn(KILN_OPENCL, KILN_F32, KILN_SHAPE(7), 4)), v, sizeof v) != KILN_OK) return 3;
    kiln_release(y);
    kiln_release(x);
    kiln_release(z);
    if (round % 2) exit(0);
    return 0; /* from main */
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* The environment of a child: this one's with POCL_CACHE_DIR replaced (made before fork, so
 * the child only execs). */
static char **child_environment(const char *pocl_cache) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; env && i < n; i++)
        if (strncmp(environ[i], "POCL_CACHE_DIR=", 15) != 0) env[k++] = environ[i];
    static char entry[1100];
    snprintf(entry, sizeof entry, "POCL_CACHE_DIR=%s", pocl_cache);
    if (env) env[k] = entry;
    return env;
}

KT_TEST(exit_with_work_on_the_device) {
    for (int r = 0; r < ROUNDS; r++) {
        char dir[] = "/tmp/kiln-pocl-cache-XXXXXX";
        KT_CHECK(mkdtemp(dir) != NULL);
        char **env = child_environment(dir);
        KT_CHECK(env != NULL);
        if (!env) return;
        char arg[16];
        snprintf(arg, sizeof arg, "%d", r);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(120); /* a hang at exit fails the round */
            execle("/proc/self/exe", "test_opencl_exit", "--child", arg, (char *)NULL, env);
            _exit(127);
        }
        KT_CHECK(pid > 0);
        int status = 0;
        if (pid > 0) KT_CHECK(waitpid(pid, &status, 0) == pid);
        KT_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d: child %s %d", r,
                     WIFSIGNALED(status) ? "killed by signal" : "exited with",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        free(env);
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (pid <= 0) return;
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--child") == 0) return child(atoi(argv[2]));
    if (kt_opencl_missing()) return 77;
    KT_RUN(exit_with_work_on_the_device);
    return kt_finish();
}
