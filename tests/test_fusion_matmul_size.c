/* Which products start a matmul-epilogue group (engine/fusion_matmul.c): by default only those
 * whose output fills at least one CPU panel (kiln__cpu_panel_bytes, half an L2); a smaller
 * product and its activation run as two ops. Either way the result is the KILN_FUSION=0 one
 * bit for bit; kiln__fusion_set_matmul_min_bytes moves the threshold (0: every product) and a
 * negative value restores the default. */
#include <kiln.h>

#include "backend/backend-impl.h"
#include "engine/fusion.h"
#include "kiln_test.h"

/* relu(x @ w^T + b) for x [m, k], w [n, k] of a fixed pattern, into y; the groups it made. */
static int64_t linear_relu(kiln_dtype dt, int64_t m, int64_t k, int64_t n, void *y) {
    kiln_tensor x = kiln_sin(kiln_arange(KILN_CPU, dt, 0, (double)(m * k), 1));
    kiln_tensor w = kiln_cos(kiln_arange(KILN_CPU, dt, 0, (double)(n * k), 1));
    kiln_tensor b = kiln_mul_scalar(kiln_sin(kiln_arange(KILN_CPU, dt, 0, (double)n, 1)), 0.25);
    x = kiln_reshape(x, KILN_SHAPE(m, k));
    w = kiln_reshape(w, KILN_SHAPE(n, k));
    KT_CHECK(kiln_sync() == KILN_OK); /* inputs made: what follows is the product and its ReLU */
    kiln__fusion_stats_reset();
    kiln_tensor t = kiln_relu(kiln_linear(x, w, b));
    KT_CHECK(kiln_into_data(t, y, (size_t)(m * n) * kiln_dtype_size(dt)) == KILN_OK);
    return kiln__fusion_stats_get().groups;
}

/* The fused result against KILN_FUSION=0's, and the groups the fused run made. */
static int64_t groups_and_same_bits(kiln_dtype dt, int64_t m, int64_t k, int64_t n) {
    size_t bytes = (size_t)(m * n) * kiln_dtype_size(dt);
    void *on = malloc(bytes), *off = malloc(bytes);
    bool was = kiln_fusion_enabled();
    kiln_fusion_set_enabled(false);
    linear_relu(dt, m, k, n, off);
    kiln_fusion_set_enabled(true);
    int64_t groups = linear_relu(dt, m, k, n, on);
    kiln_fusion_set_enabled(was);
    KT_CHECK_MSG(memcmp(on, off, bytes) == 0, "m %lld k %lld n %lld: fused != unfused", (long long)m, (long long)k,
                 (long long)n);
    free(on), free(off);
    return groups;
}

static bool fusing(void) { return kiln_engine_is_async() && kiln_fusion_enabled(); }

KT_TEST(a_product_below_one_panel_runs_apart_from_its_activation) {
    int64_t rows = kiln__cpu_panel_bytes() / (256 * 4); /* f32 rows of 256 in one panel */
    KT_CHECK(rows > 8);
    int64_t g = groups_and_same_bits(KILN_F32, rows - 1, 64, 256);
    if (fusing()) KT_CHECK_MSG(g == 0, "%lld groups", (long long)g);
    g = groups_and_same_bits(KILN_F32, 128, 784, 256); /* the Fashion-MNIST MLP's first layer */
    if (fusing()) KT_CHECK_MSG(g == 0, "%lld groups", (long long)g);
}

KT_TEST(a_product_of_one_panel_or_more_is_a_group) {
    int64_t rows = kiln__cpu_panel_bytes() / (256 * 4);
    int64_t g = groups_and_same_bits(KILN_F32, rows, 64, 256);
    if (fusing()) KT_CHECK_MSG(g == 1, "%lld groups", (long long)g);
    /* the bytes count, not the elements: half the rows in f64 fill the panel too */
    g = groups_and_same_bits(KILN_F64, rows / 2, 64, 256);
    if (fusing()) KT_CHECK_MSG(g == 1, "%lld groups", (long long)g);
}

KT_TEST(the_threshold_moves_and_comes_back) {
    kiln__fusion_set_matmul_min_bytes(0);
    int64_t g = groups_and_same_bits(KILN_F32, 37, 19, 45);
    if (fusing()) KT_CHECK_MSG(g == 1, "threshold 0: %lld groups", (long long)g);
    kiln__fusion_set_matmul_min_bytes((int64_t)1 << 40);
    int64_t rows = kiln__cpu_panel_bytes() / (256 * 4);
    g = groups_and_same_bits(KILN_F32, rows, 64, 256);
    if (fusing()) KT_CHECK_MSG(g == 0, "threshold 1 TiB: %lld groups", (long long)g);
    kiln__fusion_set_matmul_min_bytes(-1);
    if (getenv("KILN_FUSION_MATMUL_MIN_BYTES")) return; /* the default is the environment's then */
    g = groups_and_same_bits(KILN_F32, 37, 19, 45);
    if (fusing()) KT_CHECK_MSG(g == 0, "default again: %lld groups", (long long)g);
}

int main(void) {
    kt_mem_begin();
    KT_RUN(a_product_below_one_panel_runs_apart_from_its_activation);
    KT_RUN(a_product_of_one_panel_or_more_is_a_group);
    KT_RUN(the_threshold_moves_and_comes_back);
    KT_MEM_CHECK();
    return kt_finish();
}
