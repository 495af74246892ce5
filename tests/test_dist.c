/* Collectives (kiln/dist.h) on every dtype and odd sizes, against the same reduction computed
 * here from every rank's known inputs; non-dense and kept (ref'd) inputs; dispatch errors; a
 * rank whose input was poisoned makes the collective fail on its peers with a message naming
 * it, and the next collective works again; different collectives paired across ranks fail on
 * every rank. Run alone (a world of one: copies) and under
 * `mpirun -np 2` / `-np 3` (tests/CMakeLists.txt). */
#include <kiln.h>

#include "dist/dist-impl.h"
#include "engine/engine-impl.h"
#include "kiln_test.h"
#include "dist_util.h"

static int rank, world;
static const int64_t sizes[] = {1, 7, 1001, 40013};
#define N_SIZES ((int)(sizeof sizes / sizeof sizes[0]))

/* Rank r's element i: small integers, exact in every dtype (bool: every third). */
static double value(kiln_dtype dt, int r, int64_t i) {
    if (dt == KILN_BOOL) return (double)((i + r) % 3 == 0);
    return (double)((i * 7 + r * 3) % 11) - 5.0;
}

static kiln_tensor make(kiln_dtype dt, int r, int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = value(dt, r, i);
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(n), v), dt);
    free(v);
    return t;
}

/* t (consumed) as doubles; false if the read failed. */
static bool read_f64(kiln_tensor t, double *out, int64_t n) {
    return kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n) == KILN_OK;
}

KT_TEST(world_from_environment) {
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    KT_CHECK(world == (env ? atoi(env) : 1));
    KT_CHECK(rank >= 0 && rank < world);
    KT_CHECK(kiln_dist_local_rank() >= 0 && kiln_dist_local_rank() < world);
}

KT_TEST(all_reduce_every_dtype) {
    kt_mem_begin();
    for (int d = 0; d < KT_N_DTYPES; d++) {
        kiln_dtype dt = kt_all_dtypes[d];
        for (int s = 0; s < N_SIZES; s++) {
            int64_t n = sizes[s];
            double *got = malloc(sizeof(double) * (size_t)n), *kept = malloc(sizeof(double) * (size_t)n);
            bool keep = (s % 2) == 1; /* a kept input: the result goes elsewhere, the input is intact */
            kiln_tensor x = make(dt, rank, n);
            kiln_tensor r = kiln_dist_all_reduce(keep ? kiln_ref(x) : x, KILN_DIST_SUM);
            KT_CHECK(kiln_tensor_dtype(r) == dt && kiln_tensor_numel(r) == n);
            KT_CHECK(read_f64(r, got, n));
            if (keep) KT_CHECK(read_f64(x, kept, n));
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double want = 0;
                for (int q = 0; q < world; q++) want = dt == KILN_BOOL ? (want || value(dt, q, i)) : want + value(dt, q, i);
                bad += got[i] != want || (keep && kept[i] != value(dt, rank, i));
            }
            KT_CHECK_MSG(bad == 0, "%s n=%lld: %d wrong", kiln_dtype_name(dt), (long long)n, bad);
            free(got);
            free(kept);
        }
    }
    KT_MEM_CHECK();
}

KT_TEST(all_reduce_mean_floats) {
    kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        int64_t n = 1001;
        double got[1001];
        KT_CHECK(read_f64(kiln_dist_all_reduce(make(dts[d], rank, n), KILN_DIST_MEAN), got, n));
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            double want = 0;
            for (int q = 0; q < world; q++) want += value(dts[d], q, i);
            want /= world;
            bad += fabs(got[i] - want) > (dts[d] == KILN_F16 || dts[d] == KILN_BF16 ? 2e-2 : 1e-6) * fmax(1, fabs(want));
        }
        KT_CHECK_MSG(bad == 0, "%s: %d wrong", kiln_dtype_name(dts[d]), bad);
    }
}

KT_TEST(broadcast_every_dtype_every_root) {
    kt_mem_begin();
    for (int d = 0; d < KT_N_DTYPES; d++) {
        for (int root = 0; root < world; root++) {
            int64_t n = sizes[(d + root) % N_SIZES];
            double *got = malloc(sizeof(double) * (size_t)n);
            KT_CHECK(read_f64(kiln_dist_broadcast(make(kt_all_dtypes[d], rank, n), root), got, n));
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += got[i] != value(kt_all_dtypes[d], root, i);
            KT_CHECK_MSG(bad == 0, "%s root %d: %d wrong", kiln_dtype_name(kt_all_dtypes[d]), root, bad);
            free(got);
        }
    }
    KT_MEM_CHECK();
}

KT_TEST(all_gather_every_dtype) {
    kt_mem_begin();
    for (int d = 0; d < KT_N_DTYPES; d++) {
        int64_t n = sizes[d % N_SIZES];
        kiln_tensor g = kiln_dist_all_gather(make(kt_all_dtypes[d], rank, n));
        kiln_shape sh = kiln_tensor_shape(g);
        KT_CHECK(sh.ndim == 2 && sh.dims[0] == world && sh.dims[1] == n);
        double *got = malloc(sizeof(double) * (size_t)(n * world));
        KT_CHECK(read_f64(g, got, n * world));
        int bad = 0;
        for (int q = 0; q < world; q++)
            for (int64_t i = 0; i < n; i++) bad += got[q * n + i] != value(kt_all_dtypes[d], q, i);
        KT_CHECK_MSG(bad == 0, "%s: %d wrong", kiln_dtype_name(kt_all_dtypes[d]), bad);
        free(got);
    }
    KT_MEM_CHECK();
}

KT_TEST(non_dense_input) {
    /* [3, 5] transposed: the collective sees the [5, 3] values in that (logical) order */
    float v[15], got[15];
    for (int i = 0; i < 15; i++) v[i] = (float)(i + rank);
    kiln_tensor t = kiln_transpose(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 5), v), 0, 1);
    KT_CHECK(kiln_into_data(kiln_dist_all_reduce(t, KILN_DIST_SUM), got, sizeof got) == KILN_OK);
    int bad = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
            double want = 0;
            for (int q = 0; q < world; q++) want += j * 5 + i + q;
            bad += got[i * 3 + j] != (float)want;
        }
    KT_CHECK(bad == 0);
}

KT_TEST(dispatch_errors_name_the_call) {
    kiln_tensor r = kiln_dist_all_reduce(kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(4)), KILN_DIST_MEAN); int line = __LINE__;
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_ERR_DTYPE);
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "kiln_dist_all_reduce", line);
    r = kiln_dist_broadcast(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), world); line = __LINE__;
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_dist_broadcast", line);
    kiln_sync();
    /* the failed calls still took part: the next collective pairs up with the peers' */
    float got[4];
    KT_CHECK(kiln_into_data(kiln_dist_all_reduce(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_DIST_SUM), got,
                            sizeof got) == KILN_OK);
    KT_CHECK(got[0] == (float)world && got[3] == (float)world);
}

KT_TEST(poisoned_rank_fails_the_collective_everywhere) {
    int bad_rank = world - 1;
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(9));
    if (rank == bad_rank) kiln__debug_fail_next_kernel("kiln_exp");
    kiln_tensor r = kiln_dist_all_reduce(kiln_exp(x), KILN_DIST_SUM); int line = __LINE__;
    float got[9];
    kiln_status st = kiln_into_data(r, got, sizeof got);
    if (rank == bad_rank) {
        KT_CHECK(st == KILN_ERR_KERNEL);
        KT_CHECK(strstr(kiln_last_error(), "kiln_exp") != NULL); /* its own error, passed on */
    } else {
        KT_EXPECT_ERROR(KILN_ERR_KERNEL, "kiln_dist_all_reduce", line);
        char who[64];
        snprintf(who, sizeof who, "rank %d failed", bad_rank);
        KT_CHECK_MSG(strstr(kiln_last_error(), who) != NULL, "'%s' does not name %s", kiln_last_error(), who);
        char me[64];
        snprintf(me, sizeof me, "rank %d of %d", rank, world);
        KT_CHECK(strstr(kiln_last_error(), me) != NULL);
    }
    kiln_sync();
    KT_CHECK(kiln_into_data(kiln_dist_all_reduce(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(9)), KILN_DIST_SUM), got,
                            sizeof got) == KILN_OK);
    KT_CHECK(got[8] == (float)world);
}

/* Rank 0's collective paired with a different one on the others (another kind and size, or the
 * same all-reduce under another tag, as a data-parallel step one rank skipped) fails on every
 * rank instead of mixing their data; the next collectives are in step again and work. */
KT_TEST(different_collectives_fail_everywhere) {
    if (world == 1) return; /* (nothing to pair) */
    float got[3 * 3];
    kiln_tensor t = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_status st = rank == 0 ? kiln_into_data(kiln_dist_all_reduce(t, KILN_DIST_SUM), got, sizeof(float) * 3)
                               : kiln_into_data(kiln_dist_all_gather(t), got, sizeof(float) * 3 * (size_t)world);
    KT_CHECK_MSG(st == KILN_ERR_KERNEL && strstr(kiln_last_error(), "different collectives"), "rank %d: %s", rank,
                 kiln_last_error());
    int64_t outer = kiln__dist_tag(rank == 0 ? 7 : 8);
    st = kiln_into_data(kiln_dist_all_reduce(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_DIST_SUM), got,
                        sizeof(float) * 3);
    kiln__dist_tag(outer);
    KT_CHECK_MSG(st == KILN_ERR_KERNEL && strstr(kiln_last_error(), "different collectives"), "rank %d: %s", rank,
                 kiln_last_error());
    kiln_sync(); /* (the failures, already reported) */
    KT_CHECK(kiln_into_data(kiln_dist_all_reduce(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_DIST_SUM), got,
                            sizeof(float) * 3) == KILN_OK);
    KT_CHECK(got[0] == (float)world && got[2] == (float)world);
}

KT_TEST(barrier) {
    KT_CHECK(kiln_dist_barrier() == KILN_OK);
    KT_CHECK(kiln_sync() == KILN_OK);
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    KT_RUN(world_from_environment);
    KT_RUN(all_reduce_every_dtype);
    KT_RUN(all_reduce_mean_floats);
    KT_RUN(broadcast_every_dtype_every_root);
    KT_RUN(all_gather_every_dtype);
    KT_RUN(non_dense_input);
    KT_RUN(dispatch_errors_name_the_call);
    KT_RUN(poisoned_rank_fails_the_collective_everywhere);
    KT_RUN(different_collectives_fail_everywhere);
    KT_RUN(barrier);
    return kt_dist_end();
}
