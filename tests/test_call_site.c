/* Call sites: an error names the line of the outermost kiln call that raised it, even when
 * its arguments come from helpers that make kiln calls of their own (the site is recorded
 * after the arguments are evaluated), while an error raised inside a helper keeps the
 * helper's line. Runs once as started (asynchronous by default), then again with
 * KILN_SYNC=1. Also: bindings' kiln_set_call_site, and every public call has its macro. */
#include <kiln.h>
#include <unistd.h>

#include "kiln_test.h"

/* The message names this file at exactly `line` (not a longer number that starts the same). */
static int names_line(const char *msg, int line) {
    char site[64];
    snprintf(site, sizeof site, "test_call_site.c:%d", line);
    for (const char *at = strstr(msg, site); at; at = strstr(at + 1, site)) {
        char next = at[strlen(site)];
        if (next < '0' || next > '9') return 1;
    }
    return 0;
}

/* Reads t (consumed): the read must fail with st, naming op at this file's `line`. */
static void expect_read_error(kiln_tensor t, kiln_status st, const char *op, int line) {
    float buf[64];
    int64_t n = kiln_tensor_numel(t);
    size_t bytes = n > 0 ? (size_t)n * kiln_dtype_size(kiln_tensor_dtype(t)) : 0;
    KT_CHECK(bytes <= sizeof buf);
    kiln_status got = kiln_into_data(t, buf, bytes);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(got == st, "status %s, expected %s (%s)", kiln_status_str(got), kiln_status_str(st), msg);
    KT_CHECK_MSG(strstr(msg, op) != NULL, "'%s' does not name %s", msg, op);
    KT_CHECK_MSG(names_line(msg, line), "'%s' does not name line %d", msg, line);
}

/* Helpers whose kiln calls each sit on a line of their own: with the site recorded before
 * the arguments, the last of these lines is what an outer call's error used to name. */
static kiln_tensor make(int64_t rows, int64_t cols) {
    kiln_tensor t = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(rows, cols));
    return kiln_mul_scalar(t, 2.0);
}

static kiln_tensor make_index(int64_t value) {
    kiln_tensor i = kiln_full(KILN_CPU, KILN_I64, KILN_SHAPE(2), 0.0);
    return kiln_add_scalar(i, (double)value);
}

static int bad_line;
static kiln_tensor make_bad(void) {
    kiln_tensor t = make(2, 2);
    bad_line = __LINE__; return kiln_reshape(t, KILN_SHAPE(3)); /* 4 elements into 3 */
}

KT_TEST(outer_call_error_names_the_outer_line) {
    kt_mem_begin();
    int line = __LINE__; kiln_tensor y = kiln_matmul(make(2, 3), make(4, 5)); /* [2,3]@[4,5] */
    expect_read_error(y, KILN_ERR_SHAPE, "kiln_matmul", line);
    KT_MEM_CHECK();
}

KT_TEST(nested_outer_calls_name_the_outermost_failing_line) {
    kt_mem_begin();
    /* the inner kiln_add succeeds; the outer kiln_matmul fails on its result */
    int line = __LINE__; kiln_tensor y = kiln_matmul(kiln_add(make(2, 3), make(2, 3)), make(2, 3));
    expect_read_error(y, KILN_ERR_SHAPE, "kiln_matmul", line);
    KT_MEM_CHECK();
}

KT_TEST(error_inside_a_helper_names_the_helper_line) {
    kt_mem_begin();
    kiln_tensor y = kiln_matmul(make_bad(), make(2, 2));
    expect_read_error(y, KILN_ERR_SHAPE, "kiln_reshape", bad_line);
    KT_MEM_CHECK();
}

KT_TEST(kernel_error_names_the_outer_line) {
    /* an out-of-range index is found by the kernel (on an engine thread when asynchronous):
     * the op record carries the site recorded at dispatch */
    kt_mem_begin();
    int line = __LINE__; kiln_tensor y = kiln_index_select(make(3, 2), 0, make_index(7));
    expect_read_error(y, KILN_ERR_INDEX, "kiln_index_select", line);
    KT_MEM_CHECK();
}

KT_TEST(status_call_names_the_outer_line) {
    kt_mem_begin();
    float too_small[2];
    int line = __LINE__; kiln_status st = kiln_into_data(make(2, 2), too_small, sizeof too_small);
    KT_CHECK(st == KILN_ERR_BUFFER_SIZE);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_into_data") != NULL, "%s", kiln_last_error());
    KT_CHECK_MSG(names_line(kiln_last_error(), line), "'%s' does not name line %d", kiln_last_error(), line);
    KT_MEM_CHECK();
}

KT_TEST(bindings_set_the_site_themselves) {
    kt_mem_begin();
    kiln_tensor a = make(2, 3), b = make(4, 5);
    kiln_set_call_site("binding.py", 42);
    kiln_tensor y = (kiln_matmul)(a, b); /* the plain function, as a binding calls it */
    float buf[10];
    KT_CHECK(kiln_into_data(y, buf, sizeof buf) == KILN_ERR_SHAPE);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_matmul at binding.py:42") != NULL, "%s", kiln_last_error());
    /* a macro call afterwards records its own line again */
    int line = __LINE__; kiln_tensor z = kiln_matmul(make(2, 3), make(4, 5));
    expect_read_error(z, KILN_ERR_SHAPE, "kiln_matmul", line);
    KT_MEM_CHECK();
}

/* Every entry of every header's call-site list has its macro: the macro call, expanded and
 * turned into a string, names the wrapper kiln__<name>_at. */
#define KT_STR_(...) #__VA_ARGS__
#define KT_STR(...) KT_STR_(__VA_ARGS__)
#define KT_EXPANSION(ret, name, params, args) {"kiln_" #name, KT_STR(kiln_##name args)},
#define KT_EXPANSION0(ret, name) {"kiln_" #name, KT_STR(kiln_##name())},
static const struct {
    const char *name, *expansion;
} expansions[] = {KILN_CORE_API(KT_EXPANSION) KILN_TENSOR_API(KT_EXPANSION) KILN_OPS_API(KT_EXPANSION)
                      KILN_ENGINE_API(KT_EXPANSION, KT_EXPANSION0) KILN_AUTODIFF_API(KT_EXPANSION)
                          KILN_NN_API(KT_EXPANSION) KILN_NN_ROW_API(KT_EXPANSION) KILN_OPTIM_API(KT_EXPANSION)
                              KILN_LINALG_API(KT_EXPANSION) KILN_NN_LINALG_API(KT_EXPANSION)
                              KILN_DATA_API(KT_EXPANSION) KILN_TRAIN_API(KT_EXPANSION)};

KT_TEST(every_listed_call_has_its_macro) {
    int n = (int)(sizeof expansions / sizeof expansions[0]);
    KT_CHECK_MSG(n >= 150, "only %d calls listed", n);
    for (int i = 0; i < n; i++) {
        char wrapper[96];
        snprintf(wrapper, sizeof wrapper, "kiln__%s_at(", expansions[i].name + strlen("kiln_"));
        KT_CHECK_MSG(strstr(expansions[i].expansion, wrapper) != NULL, "%s expands to '%s'", expansions[i].name,
                     expansions[i].expansion);
    }
}

/* The same checks with KILN_SYNC=1, every op run at dispatch: this program, run again. */
KT_TEST(the_same_with_KILN_SYNC) {
    if (getenv("KILN_CALL_SITE_CHILD") || !kiln_engine_is_async()) return; /* already synchronous */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "KILN_SYNC=1 KILN_CALL_SITE_CHILD=1 /proc/%d/exe", (int)getpid());
    KT_CHECK_MSG(system(cmd) == 0, "the run with KILN_SYNC=1 failed (its output is above)");
}

int main(void) {
    fprintf(stderr, "engine: %s\n", kiln_engine_is_async() ? "asynchronous" : "synchronous");
    KT_RUN(outer_call_error_names_the_outer_line);
    KT_RUN(nested_outer_calls_name_the_outermost_failing_line);
    KT_RUN(error_inside_a_helper_names_the_helper_line);
    KT_RUN(kernel_error_names_the_outer_line);
    KT_RUN(status_call_names_the_outer_line);
    KT_RUN(bindings_set_the_site_themselves);
    KT_RUN(every_listed_call_has_its_macro);
    KT_RUN(the_same_with_KILN_SYNC);
    return kt_finish();
}
