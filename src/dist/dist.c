/* Collectives over MPI as engine ops. Each collective is one op record (ir/opcodes.h's
 * ALL_REDUCE .. BARRIER) that also writes dist's order token, so collectives run one after
 * another in the order this process queued them, the same order on every rank; the engine runs
 * them on its communication thread through comm_kernel below. Every collective first agrees on
 * whether some rank failed before it (one small all-reduce of the lowest failed rank), so a rank
 * whose input was poisoned never leaves its peers waiting for data that will not come (for a
 * data-parallel bucket, whose size every rank knows, the agreement travels beside the data). A
 * watchdog turns a collective blocked on a dead or stuck peer into a clear message and an
 * aborted job. Without mpirun (or without MPI at build time) this is a world of one. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#endif

#include "dist/dist-impl.h"
#include "engine/profiler.h"
#include "kiln/engine.h"

#if KILN_HAVE_MPI
#include <mpi.h>
#endif

static struct {
    pthread_once_t once, token_once;
    kiln_status init_status;
    char init_msg[256];
    bool mpi;       /* MPI_Init_thread was called by kiln */
    bool multiple;  /* MPI_THREAD_MULTIPLE: the watchdog may call MPI_Abort */
    bool finalized;
    int rank, size, local_rank;
    kiln__tensor *token; /* written by every collective: their order */
    _Atomic double timeout_s;
    /* the watchdog: the collective running now and since when */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool watchdog_started, stopping;
    pthread_t watchdog;
    const kiln__op *current;
    uint64_t current_since_ns;
} dist = {.once = PTHREAD_ONCE_INIT, .token_once = PTHREAD_ONCE_INIT, .size = 1, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static kiln_status comm_kernel(const kiln__op *op);

static bool launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static void *watchdog_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&dist.lock);
    while (!dist.stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&dist.cond, &dist.lock, &ts);
        const kiln__op *op = dist.current;
        double waited = op ? (double)(kiln__now_ns() - dist.current_since_ns) * 1e-9 : 0.0;
        if (op && waited > atomic_load(&dist.timeout_s)) {
            fprintf(stderr,
                    "kiln: %s (%s:%d) on rank %d of %d: no answer from the other ranks after %.1f s "
                    "(a rank failed or stopped); aborting the job\n",
                    op->name, op->file ? op->file : "?", op->line, dist.rank, dist.size, waited);
            fflush(stderr);
#if KILN_HAVE_MPI
            if (dist.multiple) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
            _exit(1); /* mpirun ends the job when a rank exits without MPI_Finalize */
        }
    }
    pthread_mutex_unlock(&dist.lock);
    return NULL;
}

static void init_once(void) {
    atomic_store(&dist.timeout_s, kiln__env_double("KILN_DIST_TIMEOUT", 1e-3, 1e9, 300.0));
    dist.init_status = KILN_OK;
    if (launched_by_mpirun()) {
#if KILN_HAVE_MPI
        int inited = 0, provided = 0;
        MPI_Initialized(&inited);
        int rc = inited ? MPI_Query_thread(&provided) : MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS || provided < MPI_THREAD_SERIALIZED) {
            dist.init_status = KILN_ERR_UNSUPPORTED;
            snprintf(dist.init_msg, sizeof dist.init_msg,
                     "MPI initialisation failed or gives no MPI_THREAD_SERIALIZED (level %d)", provided);
            return;
        }
        dist.mpi = !inited;
        dist.multiple = provided >= MPI_THREAD_MULTIPLE;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &dist.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &dist.size);
        MPI_Comm local;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, dist.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
            MPI_Comm_rank(local, &dist.local_rank);
            MPI_Comm_free(&local);
        }
#else
        dist.init_status = KILN_ERR_UNSUPPORTED;
        snprintf(dist.init_msg, sizeof dist.init_msg,
                 "started under mpirun, but kiln was built without MPI (install libopenmpi-dev and reconfigure)");
        return;
#endif
    }
    kiln__engine_set_comm_kernel(comm_kernel);
    if (dist.size > 1) dist.watchdog_started = pthread_create(&dist.watchdog, NULL, watchdog_main, NULL) == 0;
}

/* The order token, made with the first collective (so merely asking for the rank allocates no
 * tensor a leak check would count). */
static void token_once(void) { dist.token = kiln__tensor_new(KILN_CPU, KILN_BOOL, 0, NULL); }

bool kiln__dist_ready(kiln__opctx *c) {
    pthread_once(&dist.once, init_once);
    if (dist.init_status != KILN_OK) {
        kiln__fail(c, dist.init_status, "%s", dist.init_msg);
        return false;
    }
    if (dist.finalized) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "rank %d: kiln_dist_finalize was called", dist.rank);
        return false;
    }
    pthread_once(&dist.token_once, token_once);
    if (!dist.token) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "rank %d: cannot allocate the collectives' order token", dist.rank);
        return false;
    }
    return true;
}

int kiln__dist_rank(void) { return dist.rank; }
int kiln__dist_size(void) { return dist.size; }

kiln_status kiln_dist_init(void) {
    pthread_once(&dist.once, init_once);
    if (dist.init_status == KILN_OK) return KILN_OK;
    return kiln__report(dist.init_status, "kiln_dist_init", "%s", dist.init_msg);
}

kiln_status kiln_dist_finalize(void) {
    pthread_once(&dist.once, init_once);
    if (dist.finalized || dist.init_status != KILN_OK) return dist.init_status;
    kiln_status st = kiln_sync_all();
    dist.finalized = true;
    if (dist.watchdog_started) {
        pthread_mutex_lock(&dist.lock);
        dist.stopping = true;
        pthread_cond_signal(&dist.cond);
        pthread_mutex_unlock(&dist.lock);
        pthread_join(dist.watchdog, NULL);
        dist.watchdog_started = false;
    }
    kiln__tensor_release(dist.token);
    dist.token = NULL;
#if KILN_HAVE_MPI
    if (dist.mpi) MPI_Finalize();
#endif
    return st;
}

int kiln_dist_rank(void) {
    pthread_once(&dist.once, init_once);
    return dist.rank;
}
int kiln_dist_world_size(void) {
    pthread_once(&dist.once, init_once);
    return dist.size;
}
int kiln_dist_local_rank(void) {
    pthread_once(&dist.once, init_once);
    return dist.local_rank;
}
bool kiln_dist_available(void) { return KILN_HAVE_MPI != 0; }

void kiln_dist_set_timeout(double seconds) {
    pthread_once(&dist.once, init_once);
    if (seconds > 0) atomic_store(&dist.timeout_s, seconds);
}

/* ---- queuing ------------------------------------------------------------------------------- */

/* The tag of the collectives this thread queues (kiln__dist_tag). */
static _Thread_local int64_t queue_tag;

int64_t kiln__dist_tag(int64_t tag) {
    int64_t old = queue_tag;
    queue_tag = tag;
    return old;
}

/* The op of a collective that failed at dispatch on this rank: it takes part in the agreement
 * only, so the peers learn of the failure instead of waiting for data. */
static void submit_failed(kiln__opctx *c, kiln__opcode code, const int64_t sized[2]) {
    if (!dist.token || dist.finalized) return;
    kiln__op op;
    kiln__op_init(&op, code, c->name);
    op.out[0] = kiln__view_of(dist.token);
    op.n_out = 1;
    op.p.i[3] = 1;
    op.pi[0] = sized ? sized[0] : -1;
    op.pi[1] = sized ? sized[1] : 0;
    op.pi[2] = queue_tag;
    kiln__submit(&op);
}

/* pi[0] >= 0 (a sized all-reduce): every rank knows the element count (pi[0]) and dtype
 * (pi[1]) even when its own input failed, so the failure agreement can travel beside the data
 * (one round trip instead of two, see reduce_sized). Only for the dtypes MPI adds natively, in
 * one chunk: the choice must be the same on every rank, and it depends on n and dtype only. */
static bool sized_ok(int64_t n, kiln_dtype dt) {
    return n >= 0 && n < ((int64_t)1 << 28) && (dt == KILN_F32 || dt == KILN_F64 || dt == KILN_I32 || dt == KILN_I64);
}

static kiln__tensor *collective(kiln__opctx *c, kiln__opcode code, kiln__tensor *t, int64_t param, const int64_t *sized);

kiln__tensor *kiln__dist_collective(kiln__opctx *c, kiln__opcode code, kiln__tensor *t, int64_t param) {
    return collective(c, code, t, param, NULL);
}

kiln__tensor *kiln__dist_all_reduce_sized(kiln__opctx *c, kiln__tensor *t, int64_t n, kiln_dtype dtype) {
    int64_t sized[2] = {n, dtype};
    if (t && !t->err && (kiln__tensor_numel(t) != n || t->dtype != dtype)) {
        kiln__fail(c, KILN_ERR_INTERNAL, "rank %d: a sized all-reduce of %lld elements got %lld", dist.rank, (long long)n,
                   (long long)kiln__tensor_numel(t));
        kiln__drop(1, t), t = NULL;
    }
    return collective(c, KILN__OP_ALL_REDUCE, t, KILN_DIST_MEAN, sized_ok(n, dtype) ? sized : NULL);
}

static kiln__tensor *collective(kiln__opctx *c, kiln__opcode code, kiln__tensor *t, int64_t param, const int64_t *sized) {
    if (!kiln__dist_ready(c)) return kiln__drop(1, t), NULL;
    if (t && !t->err) {
        if (t->device != KILN_CPU)
            kiln__fail(c, KILN_ERR_DEVICE, "rank %d: collectives run on CPU tensors only", dist.rank);
        else if (code == KILN__OP_ALL_REDUCE && param != KILN_DIST_SUM && param != KILN_DIST_MEAN)
            kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "rank %d: unknown reduction %lld", dist.rank, (long long)param);
        else if (code == KILN__OP_ALL_REDUCE && param == KILN_DIST_MEAN && !kiln__dtype_is_float(t->dtype))
            kiln__fail(c, KILN_ERR_DTYPE, "rank %d: the mean of %s tensors is not defined (use KILN_DIST_SUM)",
                       dist.rank, kiln_dtype_name(t->dtype));
        else if (code == KILN__OP_BROADCAST && (param < 0 || param >= dist.size))
            kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "rank %d: root %lld is not a rank of a world of %d", dist.rank,
                       (long long)param, dist.size);
        else if (code == KILN__OP_ALL_GATHER && t->ndim + 1 > KILN_MAX_DIMS)
            kiln__fail(c, KILN_ERR_UNSUPPORTED, "rank %d: all_gather adds a dim to %d dims", dist.rank, t->ndim);
    }
    if (!kiln__ok(c, t) || c->err) {
        submit_failed(c, code, sized);
        return kiln__drop(1, t), NULL;
    }
    kiln__tensor *out = NULL;
    {
        t = kiln__t_contiguous(c, t);
        if (t && code == KILN__OP_ALL_GATHER) {
            int64_t shape[KILN_MAX_DIMS];
            shape[0] = dist.size;
            memcpy(shape + 1, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            out = kiln__t_empty(c, t->device, t->dtype, t->ndim + 1, shape);
        } else if (t) {
            out = kiln__t_output(c, t->device, t->dtype, t->ndim, t->shape, &t, 1);
        }
        if (!out) {
            submit_failed(c, code, sized);
            return kiln__drop(1, t), NULL;
        }
    }
    kiln__op op;
    kiln__op_init(&op, code, c->name);
    op.p.i[0] = param;
    op.pi[0] = sized ? sized[0] : -1;
    op.pi[1] = sized ? sized[1] : 0;
    op.pi[2] = queue_tag;
    op.in[0] = kiln__view_of(t);
    op.out[0] = kiln__view_of(out);
    op.out[1] = kiln__view_of(dist.token);
    op.n_in = 1;
    op.n_out = 2;
    kiln__submit(&op);
    kiln__tensor_release(t);
    return out;
}

kiln_tensor kiln_dist_all_reduce(kiln_tensor h, kiln_dist_reduce_op op) {
    KILN__OP_BEGIN("kiln_dist_all_reduce");
    kiln__tensor *t = kiln__arg(&c, h);
    return kiln__result(&c, kiln__dist_collective(&c, KILN__OP_ALL_REDUCE, t, (int64_t)op));
}

kiln_tensor kiln_dist_broadcast(kiln_tensor h, int root) {
    KILN__OP_BEGIN("kiln_dist_broadcast");
    kiln__tensor *t = kiln__arg(&c, h);
    return kiln__result(&c, kiln__dist_collective(&c, KILN__OP_BROADCAST, t, root));
}

kiln_tensor kiln_dist_all_gather(kiln_tensor h) {
    KILN__OP_BEGIN("kiln_dist_all_gather");
    kiln__tensor *t = kiln__arg(&c, h);
    return kiln__result(&c, kiln__dist_collective(&c, KILN__OP_ALL_GATHER, t, 0));
}

kiln_status kiln_dist_barrier(void) {
    KILN__OP_BEGIN("kiln_dist_barrier");
    if (kiln__dist_ready(&c)) {
        /* out[0] a fresh flag to wait on (the order token may carry an old collective's poison) */
        kiln__tensor *done = kiln__t_empty(&c, KILN_CPU, KILN_BOOL, 0, NULL);
        if (!done) {
            submit_failed(&c, KILN__OP_BARRIER, NULL);
        } else {
            kiln__op op;
            kiln__op_init(&op, KILN__OP_BARRIER, c.name);
            op.out[0] = kiln__view_of(done);
            op.out[1] = kiln__view_of(dist.token);
            op.pi[2] = queue_tag;
            op.n_out = 2;
            kiln__submit(&op);
            kiln_status st = kiln__wait_storage(done->storage);
            kiln__error *e = atomic_load(&done->storage->err);
            if (st != KILN_OK && e && !c.err) c.err = kiln__error_ref(e);
            kiln__tensor_release(done);
        }
    }
    if (!c.err) return KILN_OK;
    kiln_status st = kiln__error_report(c.err);
    kiln__error_unref(c.err);
    return st;
}

/* ---- the kernel (on the communication thread) --------------------------------------------- */

static void watch(const kiln__op *op) {
    pthread_mutex_lock(&dist.lock);
    dist.current = op;
    dist.current_since_ns = op ? kiln__now_ns() : 0;
    pthread_mutex_unlock(&dist.lock);
}

#if KILN_HAVE_MPI
static kiln_status mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return KILN_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    kiln__kernel_error("rank %d of %d: %s failed: %s", dist.rank, dist.size, what, msg);
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

static kiln_status all_reduce(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    int64_t n = kiln__view_numel(out);
    size_t es = kiln__elsize(out->dtype);
    char *dst = kiln__view_ptr(out);
    const char *src = kiln__view_ptr(in);
    if (dst != src) memcpy(dst, src, (size_t)n * es);
    if (dist.size == 1 || n == 0) return KILN_OK;
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
            kiln__kernel_error("rank %d: no memory for an f32 copy of %lld elements", dist.rank, (long long)n);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        uint16_t *h = (uint16_t *)dst;
        bool is_f16 = out->dtype == KILN_F16;
        for (int64_t i = 0; i < n; i++) f[i] = is_f16 ? kiln__f16_to_f32(h[i]) : kiln__bf16_to_f32(h[i]);
        st = reduce_native(f, n, MPI_FLOAT, MPI_SUM, sizeof(float));
        if (mean) scale(f, n, KILN_F32, 1.0 / dist.size);
        for (int64_t i = 0; i < n; i++) h[i] = is_f16 ? kiln__f32_to_f16(f[i]) : kiln__f32_to_bf16(f[i]);
        free(f);
        return st;
    }
    default:
        kiln__kernel_error("rank %d: no all-reduce for %s", dist.rank, kiln_dtype_name(out->dtype));
        return KILN_ERR_DTYPE;
    }
    if (st == KILN_OK && mean) scale(dst, n, out->dtype, 1.0 / dist.size);
    return st;
#else
    (void)mean;
    return KILN_ERR_INTERNAL; /* a world of more than one needs MPI */
#endif
}

static kiln_status broadcast(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    size_t bytes = (size_t)kiln__view_numel(out) * kiln__elsize(out->dtype);
    char *dst = kiln__view_ptr(out);
    const char *src = kiln__view_ptr(in);
    if (dst != src) memcpy(dst, src, bytes);
    if (dist.size == 1) return KILN_OK;
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

static kiln_status all_gather(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    size_t bytes = (size_t)kiln__view_numel(in) * kiln__elsize(in->dtype);
    char *dst = kiln__view_ptr(out);
    const char *src = kiln__view_ptr(in);
    if (dist.size == 1) {
        memcpy(dst, src, bytes);
        return KILN_OK;
    }
#if KILN_HAVE_MPI
    if (bytes > INT_MAX) {
        kiln__kernel_error("rank %d: all_gather of %zu bytes per rank (at most %d)", dist.rank, bytes, INT_MAX);
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
    v[0] = failed_here ? dist.rank : INT64_MAX;
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
                           dist.rank, dist.size);
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
static kiln_status reduce_sized(const kiln__op *op, bool failed_here, int *failed_rank) {
    *failed_rank = failed_here ? dist.rank : -1;
#if KILN_HAVE_MPI
    int64_t n = op->pi[0];
    kiln_dtype dt = (kiln_dtype)op->pi[1];
    size_t es = kiln__elsize(dt);
    char *buf = NULL, *scratch = NULL;
    if (failed_here) {
        buf = scratch = calloc((size_t)(n ? n : 1), es);
        if (!buf) { /* the peers cannot be told: their watchdog ends the job */
            kiln__kernel_error("rank %d: no memory to take part in a failed all-reduce", dist.rank);
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
    if (*failed_rank < 0 && op->p.i[0] == KILN_DIST_MEAN) scale(buf, n, dt, 1.0 / dist.size);
    return KILN_OK;
#else
    (void)op;
    return KILN_ERR_INTERNAL; /* a world of more than one needs MPI */
#endif
}

/* Agrees with the peers on the lowest rank that failed before this collective (-1: none). */
static kiln_status agree(const kiln__op *op, bool failed_here, int *failed_rank) {
    *failed_rank = failed_here ? dist.rank : -1;
    if (dist.size == 1) return KILN_OK;
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

/* The test hooks: how many collectives to let pass first (-1: off); only the communication
 * thread counts down. */
static struct {
    _Atomic int delay_skip, delay_ms, fail_skip;
} debug = {-1, 0, -1};

void kiln__dist_debug_delay(int skip, int ms) {
    atomic_store(&debug.delay_ms, ms);
    atomic_store(&debug.delay_skip, skip);
}

void kiln__dist_debug_fail(int skip) { atomic_store(&debug.fail_skip, skip); }

static bool debug_take(_Atomic int *skip) {
    int v = atomic_load(skip);
    if (KILN__LIKELY(v < 0)) return false;
    atomic_store(skip, v - 1);
    return v == 0;
}

/* Asks the scheduler for a short time slice for the calling thread, the engine's communication
 * thread (Linux 6.12+'s EEVDF takes sched_attr's sched_runtime as the slice a SCHED_OTHER task
 * asks for; older kernels ignore it). That thread mostly sleeps between tests of a collective;
 * when it wakes on a core busy with backward, a short slice gives it an early deadline, so it
 * runs at once instead of after the compute thread's slice (0.7 ms x (1 + log2 CPUs), 1.4 ms on
 * 2 cores). It gets no more CPU time: its weight (the nice value) stays as it was. */
static void request_short_slice(void) {
#if defined(__linux__) && defined(SYS_sched_setattr)
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } attr = {.size = sizeof attr, .policy = 0 /* SCHED_OTHER */};
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (nice == -1 && errno) return;
    attr.nice = nice;
    attr.runtime = 100000; /* 0.1 ms, the shortest slice the kernel takes */
    (void)syscall(SYS_sched_setattr, 0, &attr, 0u); /* best effort */
#endif
}

static kiln_status comm_kernel(const kiln__op *op) {
    static _Thread_local bool sliced;
    if (!sliced) { /* (in synchronous mode this is the caller's thread: left alone) */
        sliced = true;
        if (kiln_engine_is_async()) request_short_slice();
    }
    bool injected = debug_take(&debug.fail_skip);
    bool failed_here = injected || op->p.i[3] != 0 ||
                       (op->n_in > 0 && op->in[0].storage && atomic_load(&op->in[0].storage->err));
    watch(op);
    if (debug_take(&debug.delay_skip)) {
        long ms = atomic_load(&debug.delay_ms);
        nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
    }
    int failed_rank;
    bool sized = op->code == KILN__OP_ALL_REDUCE && op->pi[0] >= 0 && dist.size > 1;
    kiln_status st = sized ? reduce_sized(op, failed_here, &failed_rank) : agree(op, failed_here, &failed_rank);
    if (st == KILN_OK && injected) {
        kiln__kernel_error("rank %d of %d: injected failure (a test hook)", dist.rank, dist.size);
        st = KILN_ERR_KERNEL;
    } else if (st == KILN_OK && failed_rank >= 0 && !failed_here) {
        kiln__kernel_error("rank %d of %d: rank %d failed at or before this collective (e.g. its input was "
                           "poisoned), so this rank's result is not valid",
                           dist.rank, dist.size, failed_rank);
        st = KILN_ERR_KERNEL;
    } else if (st == KILN_OK && !failed_here && !sized) {
        switch (op->code) {
        case KILN__OP_ALL_REDUCE: st = all_reduce(op); break;
        case KILN__OP_BROADCAST: st = broadcast(op); break;
        case KILN__OP_ALL_GATHER: st = all_gather(op); break;
        case KILN__OP_BARRIER:
#if KILN_HAVE_MPI
            if (dist.size > 1) {
                MPI_Request req;
                st = mpi_wait(MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "MPI_Ibarrier");
            }
#endif
            break;
        default:
            kiln__kernel_error("rank %d: %s is not a collective", dist.rank, kiln__opcode_name(op->code));
            st = KILN_ERR_INTERNAL;
        }
    }
    watch(NULL);
    return st;
}
