/* The leak check: kiln_leak_check() counts live tensor handles and gradient containers and
 * names the call and file:line that made each; with KILN_LEAK_CHECK=1 a program that exits
 * with something alive reports it and exits with status 1 (this test runs itself as that
 * program: `test_leak_check leak`), and one that frees everything exits as it meant to. */
#include <kiln.h>
#include <sys/wait.h>

#include "kiln_test.h"

static int leak_line, grads_line;

/* Leaves a tensor and a gradients container alive. */
static int leaky_main(void) {
    kiln_tensor t = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), 0); leak_line = __LINE__;
    kiln_require_grad(t);
    kiln_grads *g = NULL;
    kiln_backward(kiln_sum(kiln_ref(t)), &g); grads_line = __LINE__;
    printf("%d %d\n", leak_line, grads_line);
    return 0;
}

static int tidy_main(void) {
    kiln_tensor t = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), 0);
    kiln_release(t);
    return 0;
}

KT_TEST(counts_and_names) {
    int64_t base = kiln_leak_check();
    KT_CHECK(base == 0);
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(4));
    kiln_tensor r = kiln_ref(t);
    KT_CHECK(kiln_leak_check() == base + 2);
    kiln_require_grad(t);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_ref(t)), &g) == KILN_OK);
    KT_CHECK(kiln_leak_check() == base + 3); /* the container; its gradient holds no handle */
    kiln_grads_free(g);
    kiln_release(r);
    kiln_release(t);
    KT_CHECK(kiln_leak_check() == base);
}

/* Runs this program with `mode` and KILN_LEAK_CHECK=1; returns its exit status, stderr in err. */
static int run_self(const char *self, const char *mode, char *err, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "KILN_LEAK_CHECK=1 '%s' %s >test_leak_check.out 2>test_leak_check.err", self, mode);
    int st = system(cmd);
    FILE *f = fopen("test_leak_check.err", "r");
    size_t n = f ? fread(err, 1, cap - 1, f) : 0;
    err[n] = 0;
    if (f) fclose(f);
    remove("test_leak_check.err");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *self_path;

KT_TEST(at_exit) {
    char err[8192];
    KT_CHECK(run_self(self_path, "tidy", err, sizeof err) == 0);
    KT_CHECK_MSG(err[0] == 0, "stderr: %s", err);
    KT_CHECK(run_self(self_path, "leak", err, sizeof err) == 1);
    FILE *f = fopen("test_leak_check.out", "r");
    int ll = 0, gl = 0;
    KT_CHECK(f && fscanf(f, "%d %d", &ll, &gl) == 2);
    if (f) fclose(f);
    remove("test_leak_check.out");
    char want[128];
    snprintf(want, sizeof want, "tensor f32[2, 3] made by kiln_randn at %s:%d", __FILE__, ll);
    KT_CHECK_MSG(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
    snprintf(want, sizeof want, "gradients container made by kiln_backward at %s:%d", __FILE__, gl);
    KT_CHECK_MSG(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
    KT_CHECK(strstr(err, "KILN_LEAK_CHECK=1") != NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "leak") == 0) return leaky_main();
    if (argc > 1 && strcmp(argv[1], "tidy") == 0) return tidy_main();
    self_path = argv[0];
    KT_RUN(counts_and_names);
    KT_RUN(at_exit);
    return kt_finish();
}
