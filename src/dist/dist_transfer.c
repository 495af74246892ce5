/* The transfers of dist's collectives over MPI, run by the communication thread's kernel
 * (dist.c's comm_kernel): each rank's failure agreement, the all-reduce (native sums, f32
 * copies for bf16/f16, the mean's division), broadcast, all-gather and barrier, in chunks
 * MPI's int counts can hold, waiting by testing with short sleeps so that the engine's workers
 * keep their cores. Without MPI at build time the world is one rank and these only copy. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist-impl.h"
#include "dist/dist_transfer.h"

#if KILN_HAVE_MPI
#include <mpi.h>
#endif

#if KILN_HAVE_MPI
static kiln_status mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return KILN_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    kiln__kernel_error("rank %d of %d: %s failed: %s", kiln__dist_rank(), kiln__dist_size(), what, msg);
    return KILN_ERR_IO;
}

/* MPI counts are int: long buffers go in chunks. */
#define CHUNK ((int64_t)1 << 28)

/* Waits for non-blocking collectives by testing them, sleeping between tests once they are not
 * quick (the sleep grows to 200 us): a blocking MPI call busy-polls its core, which on a small
 * machine starves the engine workers that should run backward meanwhile (the overlap).
 * With n > 1, reqs[0] is a failure agreement that every rank starts just before its data
 * (reduce_sized): its end says that every peer has arrived. Waiting for them may take
 * milliseconds, but from then on the data is moving, and over shared memory each step of it
 * (the rendezvous, the single-copy read, its acknowledgement) advances only inside some rank's
 * test; so the sleep starts again from the shortest, instead of adding up to 200 us a step to
 * every bucket, a tail that is exposed once backward is done. (Spinning once the peers are here
 * was measured and not kept: the rank that arrives last still has backward to run, and
 * spinning on its own core delays it further; BENCHMARKS.md, "Data parallelism over MPI".) */
static kiln_status mpi_wait_all(int rc, int n, MPI_Request *reqs, const char *what) {
    kiln_status st = mpi_check(rc, what);
    long sleep_ns = 0;
    bool arrived = n == 1;
    for (int polls = 0; st == KILN_OK; polls++) {
        int done = 0;
        st = mpi_check(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), what);
        if (done || st != KILN_OK) break;
        if (!arrived) {
            int flag = 0;
            st = mpi_check(MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE), what);
            if (flag) arrived = true, sleep_ns = 0;
        }
        if (polls < 64) continue;
        sleep_ns = sleep_ns ? (sleep_ns * 2 > 200000 ? 200000 : sleep_ns * 2) : 2000;
        nanosleep(&(struct timespec){0, sleep_ns}, NULL);
    }
    return st;
}

static kiln_status mpi_wait(int rc, MPI_Request *req, const char *what) { return mpi_wait_all(rc, 1, req, what); }

static kiln_status reduce_native(void *buf, int64_t n, MPI_Datatype type, MPI_Op mop, size_t elsize) {
    for (int64_t off = 0; off < n; off += CHUNK) {
        int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        MPI_Request req;
        kiln_status st = mpi_wait(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * elsize, cnt, type, mop,
                                                 MPI_COMM_WORLD, &req),
                                  &req, "MPI_Iallreduce");
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

/* The MPI type that sums dt natively (the dtypes sized_ok takes), MPI_DATATYPE_NULL otherwise. */
static MPI_Datatype native_sum_type(kiln_dtype dt) {
    switch (dt) {
    case KILN_F32: return MPI_FLOAT;
    case KILN_F64: return MPI_DOUBLE;
    case KILN_I32: return MPI_INT32_T;
    case KILN_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

/* a mean's division after the sum (only collectives that talk to MPI have more than one rank) */
static void scale(void *buf, int64_t n, kiln_dtype dt, double s) {
    if (dt == KILN_F32)
        for (int64_t i = 0; i < n; i++) ((float *)buf)[i] = (float)(((float *)buf)[i] * s);
    else if (dt == KILN_F64)
        for (int64_t i = 0; i < n; i++) ((double *)buf)[i] *= s;
}
#endif

kiln_status kiln__dist_xfer_all_reduce(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    int64_t n = kiln__view_numel(out);
    size_t es = kiln__elsize(out->dtype);
    char *dst = kiln__view_ptr(out);
    const char *src = kiln__view_ptr(in);
    if (dst != src) memcpy(dst, src, (size_t)n * es);
    if (kiln__dist_size() == 1 || n == 0) return KILN_OK;
    bool mean = op->p.i[0] == KILN_DIST_MEAN;
#if KILN_HAVE_MPI
    kiln_status st = KILN_OK;
    switch (out->dtype) {
    case KILN_F32:
    case KILN_F64:
    case KILN_I32:
    case KILN_I64: st = reduce_native(dst, n, native_sum_type(out->dtype), MPI_SUM, es); break;
    case KILN_BOOL: st = reduce_native(dst, n, MPI_UNSIGNED_CHAR, MPI_MAX, es); break;
    case KILN_F16:
    case KILN_BF16: { /* added in f32, rounded once */
        float *f = malloc(sizeof(float) * (size_t)n);
        if (!f) {
            kiln__kernel_error("rank %d: no memory for an f32 copy of %lld elements", kiln__dist_rank(), (long long)n);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        uint16_t *h = (uint16_t *)dst;
        bool is_f16 = out->dtype == KILN_F16;
        for (int64_t i = 0; i < n; i++) f[i] = is_f16 ? kiln__f16_to_f32(h[i]) : kiln__bf16_to_f32(h[i]);
        st = reduce_native(f, n, MPI_FLOAT, MPI_SUM, sizeof(float));
        if (mean) scale(f, n, KILN_F32, 1.0 / kiln__dist_size());
        for (int64_t i = 0; i < n; i++) h[i] = is_f16 ? kiln__f32_to_f16(f[i]) : kiln__f32_to_bf16(f[i]);
        free(f);
        return st;
    }
    default:
        kiln__kernel_error("rank %d: no all-reduce for %s", kiln__dist_rank(), kiln_dtype_name(out->dtype));
        return KILN_ERR_DTYPE;
    }
    if (st == KILN_OK && mean) scale(dst, n, out->dtype, 1.0 / kiln__dist_size());
    return st;
#else
    (void)mean;
    return KILN_ERR_INTERNAL; /* a world of more than one needs MPI */
#endif
}

kiln_status kiln__dist_xfer_broadcast(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    size_t bytes = (size_t)kiln__view_numel(out) * kiln__elsize(out->dtype);
    char *dst = kiln__view_ptr(out);
    const char *src = kiln__view_ptr(in);
    if (dst != src) memcpy(dst, src, bytes);
    if (kiln__dist_size() == 1) return KILN_OK;
#if KILN_HAVE_MPI
    for (size_t off = 0; off < bytes; off += (size_t)CHUNK) {
        int cnt = (int)(bytes - off < (size_t)CHUNK ? bytes - off : (size_t)CHUNK);
        MPI_Request req;
        kiln_status st = mpi_wait(MPI_Ibcast(dst + off, cnt, MPI_BYTE, (int)op->p.i[0], MPI_COMM_WORLD, &req), &req,
                                  "MPI_Ibcast");
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
#else
    return KILN_ERR_INTERNAL;
#endif
}

kiln_status kiln__dist_xfer_all_gather(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    size_t bytes = (size_t)kiln__view_numel(in) * kiln__elsize(in->dtype);
    char *dst = kiln__view_ptr(out);
    const char *src = kiln__view_ptr(in);
    if (kiln__dist_size() == 1) {
        memcpy(dst, src, bytes);
        return KILN_OK;
    }
#if KILN_HAVE_MPI
    if (bytes > INT_MAX) {
        kiln__kernel_error("rank %d: all_gather of %zu bytes per rank (at most %d)", kiln__dist_rank(), bytes, INT_MAX);
        return KILN_ERR_UNSUPPORTED;
    }
    MPI_Request req;
    return mpi_wait(MPI_Iallgather(src, (int)bytes, MPI_BYTE, dst, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req), &req,
                    "MPI_Iallgather");
#else
    return KILN_ERR_INTERNAL;
#endif
}

/* Every collective's agreement is the MIN of three words: the rank if it failed before the
 * collective (else the largest), and a signature of the collective (its kind, element count,
 * dtype and tag: a data-parallel step's number) and its negation, which a rank that failed
 * leaves out (the largest); so the ranks also learn whether they are at the same collective (a
 * program that skipped or added one on some rank, or a data-parallel step that one rank skipped:
 * failing it on every rank beats pairing different collectives' data). */
#if KILN_HAVE_MPI
static void agreement_begin(int64_t v[3], const kiln__op *op, bool failed_here) {
    v[0] = failed_here ? kiln__dist_rank() : INT64_MAX;
    v[1] = v[2] = INT64_MAX;
    if (failed_here) return;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the words */
    int64_t words[4] = {op->code, kiln__view_numel(&op->out[0]), op->out[0].dtype, op->pi[2]};
    for (int i = 0; i < 4; i++) h = (h ^ (uint64_t)words[i]) * 1099511628211ull;
    v[1] = (int64_t)(h >> 2); /* (positive, so its negation is too) */
    v[2] = -v[1];
}

static kiln_status agreement_end(const int64_t v[3], int *failed_rank) {
    if (v[1] != INT64_MAX && v[1] != -v[2]) {
        kiln__kernel_error("rank %d of %d: the ranks are at different collectives (another kind, size or dtype, or "
                           "another data-parallel step): some rank skipped or added one, so none of them is valid",
                           kiln__dist_rank(), kiln__dist_size());
        return KILN_ERR_KERNEL;
    }
    if (v[0] != INT64_MAX) *failed_rank = (int)v[0];
    return KILN_OK;
}
#endif

/* A sized all-reduce (sized_ok): the failure agreement's MIN and the data's SUM start together
 * and are waited for together, one round trip where agree() then all_reduce() take two, which
 * is most of a small bucket's time when the ranks share busy cores. A rank that failed still
 * adds a buffer of n elements (zeros), as its peers' collective expects them; everyone then
 * discards the result. *failed_rank as agree() gives it. */
kiln_status kiln__dist_xfer_reduce_sized(const kiln__op *op, bool failed_here, int *failed_rank) {
    *failed_rank = failed_here ? kiln__dist_rank() : -1;
#if KILN_HAVE_MPI
    int64_t n = op->pi[0];
    kiln_dtype dt = (kiln_dtype)op->pi[1];
    size_t es = kiln__elsize(dt);
    char *buf = NULL, *scratch = NULL;
    if (failed_here) {
        buf = scratch = calloc((size_t)(n ? n : 1), es);
        if (!buf) { /* the peers cannot be told: their watchdog ends the job */
            kiln__kernel_error("rank %d: no memory to take part in a failed all-reduce", kiln__dist_rank());
            return KILN_ERR_OUT_OF_MEMORY;
        }
    } else {
        buf = kiln__view_ptr(&op->out[0]);
        const char *src = kiln__view_ptr(&op->in[0]);
        if (buf != src) memcpy(buf, src, (size_t)n * es);
    }
    MPI_Datatype type = native_sum_type(dt);
    int64_t v[3];
    agreement_begin(v, op, failed_here);
    MPI_Request reqs[2];
    kiln_status st = mpi_check(MPI_Iallreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD, &reqs[0]),
                               "MPI_Iallreduce");
    if (st == KILN_OK) {
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, type, MPI_SUM, MPI_COMM_WORLD, &reqs[1]);
        st = rc == MPI_SUCCESS ? mpi_wait_all(rc, 2, reqs, "MPI_Iallreduce")
                               : (mpi_wait(MPI_SUCCESS, &reqs[0], "MPI_Iallreduce"), mpi_check(rc, "MPI_Iallreduce"));
    }
    free(scratch);
    if (st != KILN_OK) return st;
    if ((st = agreement_end(v, failed_rank)) != KILN_OK) return st;
    if (*failed_rank < 0 && op->p.i[0] == KILN_DIST_MEAN) scale(buf, n, dt, 1.0 / kiln__dist_size());
    return KILN_OK;
#else
    (void)op;
    return KILN_ERR_INTERNAL; /* a world of more than one needs MPI */
#endif
}

/* Agrees with the peers on the lowest rank that failed before this collective (-1: none). */
kiln_status kiln__dist_xfer_agree(const kiln__op *op, bool failed_here, int *failed_rank) {
    *failed_rank = failed_here ? kiln__dist_rank() : -1;
    if (kiln__dist_size() == 1) return KILN_OK;
#if KILN_HAVE_MPI
    int64_t v[3];
    agreement_begin(v, op, failed_here);
    MPI_Request req;
    kiln_status st = mpi_wait(MPI_Iallreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD, &req), &req,
                              "MPI_Iallreduce");
    return st == KILN_OK ? agreement_end(v, failed_rank) : st;
#else
    (void)op;
    return KILN_ERR_INTERNAL;
#endif
}

kiln_status kiln__dist_xfer_barrier(void) {
#if KILN_HAVE_MPI
    if (kiln__dist_size() > 1) {
        MPI_Request req;
        return mpi_wait(MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "MPI_Ibarrier");
    }
#endif
    return KILN_OK;
}
