/* Composed attention replaced by default (engine/substitute.c, ops/attention_pattern.c) over the
 * layouts models feed it: q permuted from [B, L, H, E] (heads split out of a projection's
 * rows), k and v broadcast over the batch ([1, H, S, E], or [H, S, E] with fewer dims), in f32
 * and f64: each composition runs as the fused kernel (counted) with the values of a double
 * reference. With KILN_SYNC=1 nothing is queued, so nothing is replaced (the count is 0, the
 * values the same); ctest runs it as is, with KILN_SYNC=1 and with KILN_FUSION=0. */
#include <kiln.h>
#include <math.h>

#include "engine/substitute.h"
#include "kiln_test.h"

enum { B = 2, H = 3, L = 5, S = 7, E = 8 };

static double q[B * H * L * E], k[H * S * E], v[H * S * E];

/* q[b, h, i, e] as the way lays it out: [B, H, L, E], or [B, L, H, E] permuted */
static double q_at(bool permuted, int b, int h, int i, int e) {
    return q[permuted ? ((b * L + i) * H + h) * E + e : ((b * H + h) * L + i) * E + e];
}

static kiln_tensor tensor(kiln_dtype dt, kiln_shape shape, const double *values) {
    return kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, shape, values), dt);
}

KT_TEST(composed_attention_over_model_layouts) {
    kt_mem_begin();
    for (int i = 0; i < B * H * L * E; i++) q[i] = sin(i * 0.37);
    for (int i = 0; i < H * S * E; i++) k[i] = cos(i * 0.21), v[i] = sin(i * 0.13 + 1);
    const double scale = 0.3;
    for (int f64 = 0; f64 <= 1; f64++)
        for (int way = 0; way < 3; way++) { /* 0: k, v [1, H, S, E]; 1: k [H, S, E]; 2: q permuted */
            kiln_dtype dt = f64 ? KILN_F64 : KILN_F32;
            kiln__subst_stats_reset();
            kiln_tensor tq = way == 2 ? kiln_transpose(tensor(dt, KILN_SHAPE(B, L, H, E), q), 1, 2)
                                      : tensor(dt, KILN_SHAPE(B, H, L, E), q);
            kiln_tensor tk = tensor(dt, way == 1 ? KILN_SHAPE(H, S, E) : KILN_SHAPE(1, H, S, E), k);
            kiln_tensor tv = tensor(dt, KILN_SHAPE(1, H, S, E), v);
            kiln_tensor sc = kiln_mul_scalar(kiln_matmul(tq, kiln_transpose(tk, -2, -1)), scale);
            static double got[B * H * L * E];
            kiln_tensor o = kiln_cast(kiln_matmul(kiln_softmax(sc, -1), tv), KILN_F64);
            KT_CHECK(kiln_into_data(o, got, sizeof got) == KILN_OK);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < L; i++) {
                        double sj[S], mx = -INFINITY, z = 0;
                        for (int j = 0; j < S; j++) {
                            sj[j] = 0;
                            for (int e = 0; e < E; e++) sj[j] += q_at(way == 2, b, h, i, e) * k[(h * S + j) * E + e];
                            sj[j] *= scale;
                            mx = sj[j] > mx ? sj[j] : mx;
                        }
                        for (int j = 0; j < S; j++) z += sj[j] = exp(sj[j] - mx);
                        for (int e = 0; e < E; e++) {
                            double acc = 0;
                            for (int j = 0; j < S; j++) acc += sj[j] / z * v[(h * S + j) * E + e];
                            KT_NEAR(got[((b * H + h) * L + i) * E + e], acc, f64 ? 1e-12 : 1e-5);
                        }
                    }
            int64_t want = kiln_engine_is_async() ? 1 : 0;
            KT_CHECK_MSG(kiln__subst_stats_get().substituted == want, "f64 %d, way %d: %lld", f64, way,
                         (long long)kiln__subst_stats_get().substituted);
        }
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(composed_attention_over_model_layouts);
    return kt_finish();
}
