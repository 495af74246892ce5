/* One handle passed twice to one call, kiln_mul(x, x): the op sees one tensor used twice (as
 * x * x in PyTorch), across binary ops, matmul, where, lerp, cat and stack, tracked too (the
 * gradient of sum(x * x) is 2 x). The two cases it cannot serve get a message that says what
 * happened: a repeat in a list past what a call remembers, and kiln_ref(x) evaluated after
 * another argument of the same call took x. */
#include <kiln.h>
#include <math.h>

#include "kiln_test.h"

#define N 6
static const float xs[N] = {0.5f, -1.5f, 2.0f, 3.0f, -0.25f, 1.0f};

static kiln_tensor make_x(void) { return kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), xs); }

static void read6(kiln_tensor t, float out[N]) {
    kiln_status st = kiln_into_data(t, out, sizeof(float) * N);
    KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
}

KT_TEST(binary_ops) {
    kt_mem_begin();
    float got[N];
    kiln_tensor x = make_x();
    read6(kiln_mul(x, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == xs[i] * xs[i]);
    x = make_x();
    read6(kiln_add(x, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == xs[i] + xs[i]);
    x = make_x();
    read6(kiln_sub(x, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == 0);
    x = make_x();
    read6(kiln_div(x, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == 1);
    x = make_x();
    read6(kiln_maximum(x, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == xs[i]);
    x = make_x();
    bool eq[N];
    KT_CHECK(kiln_into_data(kiln_eq(x, x), eq, sizeof eq) == KILN_OK);
    for (int i = 0; i < N; i++) KT_CHECK(eq[i]);
    /* a chain: each result used twice by the next call (queued, or fused, unread between) */
    x = make_x();
    kiln_tensor y = kiln_exp(x);
    kiln_tensor z = kiln_add(y, y);
    read6(kiln_mul(z, z), got);
    for (int i = 0; i < N; i++) KT_NEAR(got[i], 4 * exp(2.0 * xs[i]), 1e-5 * 4 * exp(2.0 * xs[i]));
    KT_MEM_CHECK();
}

KT_TEST(binary_kept_handle) {
    kt_mem_begin();
    float got[N], again[N];
    kiln_tensor x = make_x();
    kiln_tensor keep = kiln_ref(x);
    read6(kiln_mul(x, x), got); /* x's buffer is shared with keep: never overwritten */
    read6(keep, again);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == xs[i] * xs[i] && again[i] == xs[i]);
    KT_MEM_CHECK();
}

KT_TEST(matmul_where_lerp_lists) {
    kt_mem_begin();
    const float m[4] = {1, 2, 3, 4};
    float got[8];
    kiln_tensor a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2), m);
    KT_CHECK(kiln_into_data(kiln_matmul(a, a), got, 4 * sizeof(float)) == KILN_OK);
    KT_CHECK(got[0] == 7 && got[1] == 10 && got[2] == 15 && got[3] == 22);
    const bool mask[N] = {true, false, true, false, true, false};
    kiln_tensor x = make_x();
    float w[N];
    read6(kiln_where(kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(N), mask), x, x), w);
    for (int i = 0; i < N; i++) KT_CHECK(w[i] == xs[i]);
    x = make_x();
    read6(kiln_lerp(x, x, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(N), 0.3)), w);
    for (int i = 0; i < N; i++) KT_NEAR(w[i], xs[i], 1e-6);
    x = make_x();
    float cat[2 * N];
    KT_CHECK(kiln_into_data(kiln_cat((kiln_tensor[]){x, x}, 2, 0), cat, sizeof cat) == KILN_OK);
    for (int i = 0; i < 2 * N; i++) KT_CHECK(cat[i] == xs[i % N]);
    x = make_x();
    KT_CHECK(kiln_into_data(kiln_stack((kiln_tensor[]){x, x}, 2, 0), cat, sizeof cat) == KILN_OK);
    for (int i = 0; i < 2 * N; i++) KT_CHECK(cat[i] == xs[i % N]);
    KT_MEM_CHECK();
}

/* d/dx sum(x * x) = 2 x; d/dx sum(x + x) = 2; d/dA sum(A @ A) = 1 A^T + A^T 1 (as torch). */
KT_TEST(gradients) {
    kt_mem_begin();
    kiln_tensor x = kiln_leaf(make_x());
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_ref(x), kiln_ref(x))), &g) == KILN_OK);
    float got[N];
    read6(kiln_grad(g, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == 2 * xs[i]);
    kiln_grads_free(g);
    kiln_tensor r = kiln_ref(x); /* one handle, passed twice */
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(r, r)), &g) == KILN_OK);
    read6(kiln_grad(g, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == 2 * xs[i]);
    kiln_grads_free(g);
    r = kiln_ref(x);
    KT_CHECK(kiln_backward(kiln_sum(kiln_add(r, r)), &g) == KILN_OK);
    read6(kiln_grad(g, x), got);
    for (int i = 0; i < N; i++) KT_CHECK(got[i] == 2);
    kiln_grads_free(g);
    kiln_release(x);
    const float m[4] = {1, 2, 3, 4}; /* A = [[1, 2], [3, 4]]: grad = ones A^T + A^T ones */
    kiln_tensor a = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2), m));
    r = kiln_ref(a);
    KT_CHECK(kiln_backward(kiln_sum(kiln_matmul(r, r)), &g) == KILN_OK);
    float ga[4];
    KT_CHECK(kiln_into_data(kiln_grad(g, a), ga, sizeof ga) == KILN_OK);
    /* ones @ A^T: row sums of A per column = [3, 7]; A^T @ ones: column sums per row = [4, 6] */
    KT_CHECK(ga[0] == 3 + 4 && ga[1] == 7 + 4 && ga[2] == 3 + 6 && ga[3] == 7 + 6);
    kiln_grads_free(g);
    kiln_release(a);
    KT_MEM_CHECK();
}

/* kiln_ref(x) run after another argument of the same statement consumed x: the message says
 * so, rather than "pass kiln_ref(t)" to a caller who did. */
KT_TEST(ref_after_consumed_in_same_statement) {
    kiln_tensor x = make_x();
    int line = __LINE__ + 1;
    kiln_tensor e = kiln_exp(x), late = kiln_ref(x); /* (the order C may pick for f(kiln_ref(x), g(x))) */
    KT_CHECK(kiln_into_data(late, NULL, 0) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "same statement", line);
    KT_CHECK(strstr(kiln_last_error(), "kiln_exp") != NULL);
    kiln_release(e);
    /* on another line, the usual message */
    x = make_x();
    e = kiln_exp(x);
    line = __LINE__ + 1;
    late = kiln_ref(x);
    KT_CHECK(kiln_into_data(late, NULL, 0) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "pass kiln_ref(t) to keep using it", line);
    kiln_release(e);
}

/* A list longer than what a call remembers, with a repeat past that point. */
KT_TEST(repeat_in_a_long_list) {
    kt_mem_begin();
    kiln_tensor ts[12];
    for (int i = 0; i < 11; i++) ts[i] = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1), i);
    ts[11] = ts[9];
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_cat(ts, 12, 0);
    KT_CHECK(kiln_into_data(y, NULL, 0) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "passed twice to kiln_cat", line);
    /* within what is remembered, the repeat is served */
    for (int i = 0; i < 11; i++) ts[i] = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1), i);
    ts[11] = ts[2];
    float got[12];
    KT_CHECK(kiln_into_data(kiln_cat(ts, 12, 0), got, sizeof got) == KILN_OK);
    KT_CHECK(got[10] == 10 && got[11] == 2);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(binary_ops);
    KT_RUN(binary_kept_handle);
    KT_RUN(matmul_where_lerp_lists);
    KT_RUN(gradients);
    KT_RUN(ref_after_consumed_in_same_statement);
    KT_RUN(repeat_in_a_long_list);
    return kt_finish();
}
