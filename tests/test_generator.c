/* Generators and the global seed: the same seed and sequence of calls replay the same values
 * (rand, randn, dropout), whatever the thread count; successive draws differ; generators are
 * independent of each other and of the global one; bad input names the call and its line. */
#include <kiln.h>

#include "kiln_test.h"

#define N 20000 /* enough elements to be split across threads */

static void read_f32(kiln_tensor t, float *out, int64_t n) {
    KT_CHECK(kiln_into_data(t, out, sizeof(float) * (size_t)n) == KILN_OK);
}

static float a[N], b[N], c[N];

KT_TEST(generator_replays) {
    kt_mem_begin();
    kiln_generator *g1 = kiln_generator_new(42), *g2 = kiln_generator_new(42), *g3 = kiln_generator_new(43);
    read_f32(kiln_randn_gen(g1, KILN_CPU, KILN_F32, KILN_SHAPE(N)), a, N);
    read_f32(kiln_randn_gen(g2, KILN_CPU, KILN_F32, KILN_SHAPE(N)), b, N);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    read_f32(kiln_randn_gen(g3, KILN_CPU, KILN_F32, KILN_SHAPE(N)), c, N);
    KT_CHECK(memcmp(a, c, sizeof a) != 0); /* another seed */
    read_f32(kiln_randn_gen(g1, KILN_CPU, KILN_F32, KILN_SHAPE(N)), c, N);
    KT_CHECK(memcmp(a, c, sizeof a) != 0); /* the next draw */
    double mean = 0;
    for (int i = 0; i < N; i++) mean += c[i] / N;
    KT_CHECK(fabs(mean) < 0.05);
    kiln_generator_manual_seed(g1, 42); /* replays from the start */
    read_f32(kiln_randn_gen(g1, KILN_CPU, KILN_F32, KILN_SHAPE(N)), c, N);
    KT_CHECK(memcmp(a, c, sizeof a) == 0);
    /* rand: in [0, 1), replayed */
    kiln_generator_manual_seed(g1, 5);
    kiln_generator_manual_seed(g2, 5);
    read_f32(kiln_rand_gen(g1, KILN_CPU, KILN_F32, KILN_SHAPE(N)), a, N);
    read_f32(kiln_rand_gen(g2, KILN_CPU, KILN_F32, KILN_SHAPE(N)), b, N);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    int out = 0;
    for (int i = 0; i < N; i++) out += !(a[i] >= 0 && a[i] < 1);
    KT_CHECK(out == 0);
    kiln_generator_free(g1);
    kiln_generator_free(g2);
    kiln_generator_free(g3);
    kiln_generator_free(NULL);
    KT_MEM_CHECK();
}

KT_TEST(global_seed) {
    kt_mem_begin();
    kiln_manual_seed(7);
    read_f32(kiln_rand_gen(NULL, KILN_CPU, KILN_F32, KILN_SHAPE(N)), a, N);
    read_f32(kiln_rand_gen(NULL, KILN_CPU, KILN_F32, KILN_SHAPE(N)), b, N);
    KT_CHECK(memcmp(a, b, sizeof a) != 0);
    kiln_manual_seed(7);
    read_f32(kiln_rand_gen(NULL, KILN_CPU, KILN_F32, KILN_SHAPE(N)), c, N);
    KT_CHECK(memcmp(a, c, sizeof a) == 0);
    /* a generator with the same seed: the same sequence, its own counter */
    kiln_generator *g = kiln_generator_new(7);
    read_f32(kiln_rand_gen(g, KILN_CPU, KILN_F32, KILN_SHAPE(N)), c, N);
    KT_CHECK(memcmp(a, c, sizeof a) == 0);
    kiln_generator_free(g);
    KT_MEM_CHECK();
}

KT_TEST(thread_count_does_not_matter) {
    kt_mem_begin();
    int threads = kiln_num_threads();
    kiln_set_num_threads(1);
    kiln_manual_seed(11);
    read_f32(kiln_randn_gen(NULL, KILN_CPU, KILN_F32, KILN_SHAPE(N)), a, N);
    kiln_set_num_threads(4);
    kiln_manual_seed(11);
    read_f32(kiln_randn_gen(NULL, KILN_CPU, KILN_F32, KILN_SHAPE(N)), b, N);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    kiln_set_num_threads(threads);
    KT_MEM_CHECK();
}

KT_TEST(dropout_replays) {
    kt_mem_begin();
    kiln_generator *g = kiln_generator_new(3);
    read_f32(kiln_dropout_gen(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N)), 0.25, g), a, N);
    kiln_generator_manual_seed(g, 3);
    read_f32(kiln_dropout_gen(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N)), 0.25, g), b, N);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    read_f32(kiln_dropout_gen(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N)), 0.25, g), c, N);
    KT_CHECK(memcmp(a, c, sizeof a) != 0);
    int zeros = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        zeros += a[i] == 0;
        bad += a[i] != 0 && fabsf(a[i] - 1 / 0.75f) > 1e-6f;
    }
    KT_CHECK(bad == 0);
    KT_CHECK_MSG(fabs(zeros / (double)N - 0.25) < 0.02, "%d of %d dropped", zeros, N);
    kiln_generator_free(g);
    KT_MEM_CHECK();
}

KT_TEST(bad_input) {
    kt_mem_begin();
    kiln_generator *g = kiln_generator_new(1);
    KT_READ_ERROR(kiln_rand_gen(g, KILN_CPU, KILN_I32, KILN_SHAPE(3)), KILN_ERR_DTYPE, "kiln_rand_gen");
    KT_READ_ERROR(kiln_randn_gen(NULL, KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), KILN_ERR_DTYPE, "kiln_randn_gen");
    float v;
    kiln_tensor t = kiln_randn_gen(g, KILN_CPU, KILN_F32, KILN_SHAPE(-2, 3)); int line = __LINE__;
    KT_CHECK(kiln_into_scalar(t, &v) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_randn_gen", line);
    t = kiln_rand_gen(g, KILN_CPU, KILN_F32, KILN_SHAPE(INT64_MAX / 2, 4)); line = __LINE__; /* hostile size */
    KT_CHECK(kiln_into_scalar(t, &v) == KILN_ERR_OUT_OF_MEMORY);
    KT_EXPECT_ERROR(KILN_ERR_OUT_OF_MEMORY, "kiln_rand_gen", line);
    KT_READ_ERROR(kiln_rand_gen(g, KILN_CUDA, KILN_F32, KILN_SHAPE(3)), KILN_ERR_DEVICE, "kiln_rand_gen");
    KT_READ_ERROR(kiln_dropout_gen(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), 1.5, g), KILN_ERR_INVALID_ARGUMENT,
                  "kiln_dropout_gen");
    KT_READ_ERROR(kiln_dropout_gen(kiln_ones(KILN_CPU, KILN_I64, KILN_SHAPE(3)), 0.5, NULL), KILN_ERR_DTYPE,
                  "kiln_dropout_gen");
    kiln_tensor stale = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_release(stale);
    kiln_tensor d = kiln_dropout_gen(stale, 0.5, g); int dline = __LINE__;
    KT_CHECK(kiln_tensor_status(d) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(kiln_into_scalar(d, &v) == KILN_ERR_STALE_HANDLE);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_dropout_gen", dline);
    kiln_generator_free(g);
    kiln_sync();
    kiln_clear_error();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(generator_replays);
    KT_RUN(global_seed);
    KT_RUN(thread_count_does_not_matter);
    KT_RUN(dropout_replays);
    KT_RUN(bad_input);
    return kt_finish();
}
