/* A histogram of a tensor in TensorBoard's default buckets, computed on the tensor's own
 * device with kiln ops so that only 4 + 1548 numbers are read back (a weight of millions of
 * elements never crosses to the host). Each value's bucket is first estimated from its
 * logarithm (the edges are 1e-12 * 1.1^k), then corrected by comparing with the exact edges,
 * so the counts equal numpy.histogram's over the same edges, value for value. An f32 tensor is
 * counted in f32 throughout, exactly: for an f32 value v and an edge e, v >= e exactly when v >=
 * the smallest f32 not below e, so those f32 edges stand in for the f64 ones. */
#include <math.h>
#include <pthread.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "train/summary-impl.h"

#define EDGES_MAX 1600
static double edges[EDGES_MAX];
static float edges_up32[EDGES_MAX]; /* the smallest f32 >= each edge */
static float last_down32;           /* the largest f32 <= the last edge (the last bucket is closed) */
static int n_edges, n_positive;     /* n_positive: edges above 0 (as many below) */

/* The same arithmetic as torch's default_bins (v *= 1.1 in double from 1e-12 while v < 1e20),
 * so the edges are bit-identical to the ones a Python reader builds. */
static void edges_init(void) {
    double pos[EDGES_MAX / 2];
    int n = 0;
    for (double v = 1e-12; v < 1e20 && n < EDGES_MAX / 2; v *= 1.1) pos[n++] = v;
    n_positive = n;
    n_edges = 0;
    for (int i = n - 1; i >= 0; i--) edges[n_edges++] = -pos[i];
    edges[n_edges++] = 0.0;
    for (int i = 0; i < n; i++) edges[n_edges++] = pos[i];
    for (int i = 0; i < n_edges; i++) {
        float f = (float)edges[i];
        edges_up32[i] = (double)f < edges[i] ? nextafterf(f, INFINITY) : f;
    }
    float f = (float)edges[n_edges - 1];
    last_down32 = (double)f > edges[n_edges - 1] ? nextafterf(f, -INFINITY) : f;
}

int kiln__histogram_edges(const double **out) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, edges_init);
    *out = edges;
    return n_edges;
}

/* One step toward the bucket that holds v: idx - (v < left[idx]) + (v >= right[idx]), clamped
 * to the buckets. idx holds whole numbers in v's dtype, so the chain stays one dtype and fuses;
 * consumes idx, keeps v and the edges. */
static kiln_tensor correct(kiln_tensor idx, kiln_tensor v, kiln_tensor left, kiln_tensor right, int buckets) {
    kiln_tensor at = kiln_cast(kiln_ref(idx), KILN_I64);
    kiln_tensor lo = kiln_index_select(kiln_ref(left), 0, kiln_ref(at));
    kiln_tensor hi = kiln_index_select(kiln_ref(right), 0, at);
    kiln_dtype work = kiln_tensor_dtype(v);
    kiln_tensor below = kiln_cast(kiln_lt(kiln_ref(v), lo), work);
    kiln_tensor above = kiln_cast(kiln_ge(kiln_ref(v), hi), work);
    return kiln_clamp(kiln_add(kiln_sub(idx, below), above), 0, buckets - 1);
}

kiln_tensor kiln__histogram_compute(kiln_tensor values) {
    const double *e;
    int n = kiln__histogram_edges(&e), buckets = n - 1, zero = n_positive;
    kiln_device dev = kiln_tensor_device(values);
    kiln_dtype dt = kiln_tensor_dtype(values);
    bool in_f32 = dt == KILN_F32 || dt == KILN_F16 || dt == KILN_BF16; /* f16/bf16 widen to f32 exactly */
    kiln_dtype work = in_f32 ? KILN_F32 : KILN_F64;
    kiln_no_grad_begin();
    kiln_tensor v = kiln_cast(kiln_reshape(kiln_detach(values), KILN_SHAPE(-1)), work);
    /* numpy sums in f64 */
    kiln_tensor wide = kiln_cast(kiln_ref(v), KILN_F64);
    kiln_tensor stats[4] = {kiln_cast(kiln_min(kiln_ref(v)), KILN_F64), kiln_cast(kiln_max(kiln_ref(v)), KILN_F64),
                            kiln_sum(kiln_ref(wide)), kiln_sum(kiln_mul(kiln_ref(wide), kiln_ref(wide)))};
    kiln_release(wide);
    double lowest = in_f32 ? edges_up32[0] : e[0], highest = in_f32 ? last_down32 : e[n - 1];
    kiln_tensor counted = kiln_logical_and(kiln_ge_scalar(kiln_ref(v), lowest), kiln_le_scalar(kiln_ref(v), highest));
    /* values not counted (NaN, inf, beyond the edges) become 0 so the estimate stays finite */
    kiln_tensor safe = kiln_masked_fill(v, kiln_logical_not(kiln_ref(counted)), 0.0);
    /* k: how many positive edges are <= |v|, estimated in f32 from log(|v| / 1e-12) / log(1.1).
     * Off by at most one bucket (f32's log is good to ~1e-4 of a bucket here; counted values
     * are within f32's range), which the comparison with the exact edges below corrects. */
    kiln_tensor v32 = in_f32 ? kiln_ref(safe) : kiln_cast(kiln_ref(safe), KILN_F32);
    kiln_tensor k = kiln_add_scalar(kiln_floor(kiln_mul_scalar(kiln_log(kiln_mul_scalar(kiln_maximum_scalar(kiln_abs(kiln_ref(v32)), 1e-30), 1e12)),
                                                             1.0 / log(1.1))),
                                    1.0);
    k = kiln_clamp(k, 0, n_positive);
    /* bucket zero + k right of 0, zero - 1 - k left of it: zero - 1 - k + (v >= 0) * (2k + 1) */
    kiln_tensor side = kiln_cast(kiln_ge_scalar(v32, 0.0), KILN_F32);
    kiln_tensor twice = kiln_add_scalar(kiln_mul_scalar(kiln_ref(k), 2.0), 1.0);
    kiln_tensor idx = kiln_add(kiln_rsub_scalar(k, zero - 1), kiln_mul(side, twice));
    idx = kiln_cast(kiln_clamp(idx, 0, buckets - 1), work);
    const void *left_edges = in_f32 ? (const void *)edges_up32 : (const void *)e;
    const void *right_edges = in_f32 ? (const void *)(edges_up32 + 1) : (const void *)(e + 1);
    kiln_tensor left = kiln_from_data(dev, work, KILN_SHAPE(buckets), left_edges);
    kiln_tensor right = kiln_from_data(dev, work, KILN_SHAPE(buckets), right_edges);
    idx = correct(idx, safe, left, right, buckets);
    kiln_release(left);
    kiln_release(right);
    kiln_release(safe);
    kiln_tensor counts = kiln_scatter_add(kiln_zeros(dev, KILN_F64, KILN_SHAPE(buckets)), 0, kiln_cast(idx, KILN_I64),
                                          kiln_cast(counted, KILN_F64));
    kiln_tensor parts[2] = {kiln_stack(stats, 4, 0), counts};
    kiln_tensor out = kiln_cat(parts, 2, 0);
    kiln_no_grad_end();
    return out;
}

bool kiln__histogram_trim(const double *stats, int64_t numel, double *limits, double *counts, kiln__histogram_proto *out) {
    const double *e;
    int buckets = kiln__histogram_edges(&e) - 1;
    const double *c = stats + 4;
    int first = -1, last = -1;
    for (int i = 0; i < buckets; i++)
        if (c[i] > 0) {
            if (first < 0) first = i;
            last = i;
        }
    if (first < 0) return false;
    /* TensorBoard keeps right edges only, so one empty bucket on the left marks where the first
     * non-empty one starts (its right edge is that bucket's left edge). */
    size_t n = 0;
    if (first == 0) {
        limits[n] = e[0];
        counts[n++] = 0;
    }
    for (int i = first > 0 ? first - 1 : 0; i <= last; i++) {
        limits[n] = e[i + 1];
        counts[n++] = c[i];
    }
    *out = (kiln__histogram_proto){.min = stats[0], .max = stats[1], .num = (double)numel, .sum = stats[2],
                                   .sum_squares = stats[3], .bucket_limit = limits, .bucket = counts, .buckets = n};
    return true;
}
