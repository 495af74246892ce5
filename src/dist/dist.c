/* Collectives over MPI as engine ops. Each collective is one op record (ir/opcodes.h's
 * KILN__COMM_OPCODES: ALL_REDUCE, BROADCAST, ALL_GATHER, BARRIER) that also writes dist's order
 * token, so collectives run one after another in the order this process queued them, the same
 * order on every rank; the engine runs them on its communication thread through comm_kernel
 * below. Every collective first agrees on
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
#include "dist/dist_transfer.h"
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
    kiln_status st = sized ? kiln__dist_xfer_reduce_sized(op, failed_here, &failed_rank) : kiln__dist_xfer_agree(op, failed_here, &failed_rank);
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
        case KILN__OP_ALL_REDUCE: st = kiln__dist_xfer_all_reduce(op); break;
        case KILN__OP_BROADCAST: st = kiln__dist_xfer_broadcast(op); break;
        case KILN__OP_ALL_GATHER: st = kiln__dist_xfer_all_gather(op); break;
        case KILN__OP_BARRIER: st = kiln__dist_xfer_barrier(); break;
        default:
            kiln__kernel_error("rank %d: %s is not a collective", dist.rank, kiln__opcode_name(op->code));
            st = KILN_ERR_INTERNAL;
        }
    }
    watch(NULL);
    return st;
}
