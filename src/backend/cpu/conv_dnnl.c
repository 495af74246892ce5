/* CONV2D, CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT for f32 through oneDNN.
 *
 * Tensors stay in kiln's layouts: NCHW activations, OIHW (GOIHW when grouped) weights, so no
 * reorder runs; oneDNN picks its implementation for those layouts. A primitive is created
 * once per geometry and thread count and kept in a small fixed table (creation costs
 * 0.1-1 ms, a Fashion-MNIST conv 1-10 ms); when the table is full further shapes run
 * uncached. Each call brings its own scratchpad (user scratchpad mode), so two engine
 * workers may run one cached primitive at once.
 *
 * Threads (DESIGN.md section 3, one thread budget): oneDNN here runs on OpenMP. The calling
 * engine worker sets its own OpenMP thread count before it creates and runs a primitive:
 * kiln__pool_threads() when it is the only oneDNN conv running, 1 when another one already
 * is (or when called inside a kiln pool task), so two workers never ask for two cores each
 * on a 2-core machine. kiln's pool is not used during the call, so its workers sleep on
 * their condition variable. The thread count is part of the cache key, because some oneDNN
 * implementations fix their work split when the primitive is created.
 *
 * Default path: oneDNN for every f32 conv it takes (measured in bench/bench_conv.c at the
 * Fashion-MNIST CNN's shapes, see the commit and README); KILN_CONV=builtin|dnnl forces one. */
#include "backend/cpu/conv_dnnl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"

#if KILN_HAVE_DNNL

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>

static atomic_int dnnl_forced = -1; /* -1: from KILN_CONV (or the default), 0 built-in, 1 oneDNN */
static atomic_int dnnl_running;     /* oneDNN convs running now, on any thread */
static atomic_long dnnl_calls;
static atomic_int env_cached = -1;  /* KILN_CONV read once: 0 builtin, 1 dnnl (or unset) */

void kiln__conv_dnnl_force(int mode) {
    if (mode < 0) atomic_store(&env_cached, -1);
    atomic_store(&dnnl_forced, mode < 0 ? -1 : mode != 0);
}

long kiln__conv_dnnl_calls(void) { return atomic_load(&dnnl_calls); }

static int env_mode(void) {
    atomic_int *cached = &env_cached;
    int m = atomic_load(cached);
    if (m >= 0) return m;
    const char *e = getenv("KILN_CONV");
    m = e && strcmp(e, "builtin") == 0 ? 0 : 1;
    atomic_store(cached, m);
    return m;
}

static bool dnnl_wanted(void) {
    int f = atomic_load(&dnnl_forced);
    return f >= 0 ? f == 1 : env_mode() == 1;
}

const char *kiln__conv_dnnl_mode(void) { return dnnl_wanted() ? "dnnl" : "builtin"; }

/* ---- engine, OpenMP thread count ----------------------------------------------------- */

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t cpu_engine;
static dnnl_status_t dnnl_engine_status;
static void (*omp_set_threads)(int); /* libgomp's omp_set_num_threads, loaded with oneDNN */

static void cache_free_all(void);

static void dnnl_init(void) {
    dnnl_engine_status = dnnl_engine_create(&cpu_engine, dnnl_cpu, 0);
    /* libgomp comes in with libdnnl; looked up rather than linked so no -lgomp is needed */
    *(void **)&omp_set_threads = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (dnnl_engine_status == dnnl_success) atexit(cache_free_all);
}

/* ---- primitive cache ----------------------------------------------------------------- */

typedef struct {
    int64_t code, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, bias, threads;
} dnnl_key;

typedef struct {
    dnnl_key key;
    dnnl_primitive_t prim;
    size_t scratch_bytes;
    int users; /* calls running it now; under cache_lock */
    bool used;
} dnnl_entry;

#define CACHE_SIZE 64
static dnnl_entry cache[CACHE_SIZE];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cache_closed;

/* At exit: destroy what no call is running (a call still running at exit keeps its own). */
static void cache_free_all(void) {
    pthread_mutex_lock(&cache_lock);
    cache_closed = true;
    for (int i = 0; i < CACHE_SIZE; i++)
        if (cache[i].used && cache[i].users == 0) {
            dnnl_primitive_destroy(cache[i].prim);
            cache[i].used = false;
        }
    pthread_mutex_unlock(&cache_lock);
}

static kiln_status dnnl_fail(dnnl_status_t s, const char *what, kiln__opcode code) {
    kiln__kernel_error("oneDNN %s for %s failed: %s", what, kiln__opcode_name(code), dnnl_status2str(s));
    return s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_KERNEL;
}

/* The primitive for key k: NULL with *st = KILN_OK when oneDNN has no implementation for it
 * (the built-in kernel runs it), NULL with an error status when creation failed otherwise. */
static dnnl_primitive_t create(const dnnl_key *k, size_t *scratch, kiln_status *st) {
    dnnl_memory_desc_t x, w, b, y;
    dnnl_dims_t xd = {k->n, k->c, k->h, k->w}, yd = {k->n, k->o, k->oh, k->ow};
    dnnl_dims_t gwd = {k->groups, k->o / k->groups, k->c / k->groups, k->kh, k->kw}, bd = {k->o};
    dnnl_dims_t wd = {k->o, k->c / k->groups, k->kh, k->kw};
    dnnl_dims_t strides = {k->sh, k->sw}, dil = {k->dh - 1, k->dw - 1}, pl = {k->ph, k->pw};
    /* the right/bottom padding that makes the output size come out as kiln's */
    dnnl_dims_t pr = {(k->oh - 1) * k->sh + (k->kh - 1) * k->dh + 1 - k->h - k->ph,
                      (k->ow - 1) * k->sw + (k->kw - 1) * k->dw + 1 - k->w - k->pw};
    bool grouped = k->groups > 1;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, dnnl_nchw);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, dnnl_nchw);
    if (s == dnnl_success)
        s = grouped ? dnnl_memory_desc_init_by_tag(&w, 5, gwd, dnnl_f32, dnnl_goihw)
                    : dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_oihw);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_a);
    dnnl_convolution_desc_t fwd, desc;
    if (s == dnnl_success)
        s = dnnl_dilated_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct, &x, &w,
                                                       k->bias ? &b : NULL, &y, strides, dil, pl, pr);
    if (s == dnnl_success && k->code == KILN__OP_CONV2D_BACKWARD_INPUT)
        s = dnnl_dilated_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &x, &w, &y, strides,
                                                             dil, pl, pr);
    if (s == dnnl_success && k->code == KILN__OP_CONV2D_BACKWARD_WEIGHT)
        s = dnnl_dilated_convolution_backward_weights_desc_init(&desc, dnnl_convolution_direct, &x, &w, NULL, &y,
                                                                strides, dil, pl, pr);
    if (s != dnnl_success) {
        *st = s == dnnl_unimplemented || s == dnnl_invalid_arguments ? KILN_OK : dnnl_fail(s, "descriptor", k->code);
        return NULL;
    }
    dnnl_primitive_attr_t attr = NULL;
    s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&hint, &fwd, attr, cpu_engine, NULL);
    if (s == dnnl_success && k->code != KILN__OP_CONV2D)
        s = dnnl_primitive_desc_create(&pd, &desc, attr, cpu_engine, hint);
    else if (s == dnnl_success)
        pd = hint, hint = NULL;
    dnnl_primitive_t prim = NULL;
    if (s == dnnl_success) {
        const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        *scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
        s = dnnl_primitive_create(&prim, pd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) *st = s == dnnl_unimplemented ? KILN_OK : dnnl_fail(s, "primitive creation", k->code);
    return s == dnnl_success ? prim : NULL;
}

/* Finds or creates the primitive for k. *slot is its cache index, or -1 when the caller owns
 * (and destroys) an uncached primitive. */
static dnnl_primitive_t acquire(const dnnl_key *k, int *slot, size_t *scratch, kiln_status *st) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++)
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0) {
            cache[i].users++;
            *slot = i;
            *scratch = cache[i].scratch_bytes;
            pthread_mutex_unlock(&cache_lock);
            return cache[i].prim;
        }
    pthread_mutex_unlock(&cache_lock);
    dnnl_primitive_t p = create(k, scratch, st);
    *slot = -1;
    if (!p) return NULL;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++) {
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0) break; /* another thread won */
        if (!cache[i].used) {
            cache[i] = (dnnl_entry){.key = *k, .prim = p, .scratch_bytes = *scratch, .users = 1, .used = true};
            *slot = i;
            break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return p;
}

static void release(dnnl_primitive_t p, int slot) {
    if (slot < 0) {
        dnnl_primitive_destroy(p);
        return;
    }
    pthread_mutex_lock(&cache_lock);
    cache[slot].users--;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- the kernel ---------------------------------------------------------------------- */

static kiln_status execute(dnnl_primitive_t prim, size_t scratch_bytes, const dnnl_key *k, int n_args,
                           const int *arg_kind, void *const *ptr) {
    dnnl_exec_arg_t args[5];
    dnnl_memory_t mem[5] = {0};
    dnnl_stream_t stream = NULL;
    void *scratch = scratch_bytes ? malloc(scratch_bytes) : NULL;
    if (scratch_bytes && !scratch) {
        kiln__kernel_error("out of memory for oneDNN's %zu-byte %s scratchpad", scratch_bytes,
                           kiln__opcode_name((kiln__opcode)k->code));
        return KILN_ERR_OUT_OF_MEMORY;
    }
    const_dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_primitive_get_primitive_desc(prim, &pd);
    if (s == dnnl_success) s = dnnl_stream_create(&stream, cpu_engine, dnnl_stream_default_flags);
    for (int i = 0; i < n_args && s == dnnl_success; i++) {
        s = dnnl_memory_create(&mem[i], dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg_kind[i]),
                               cpu_engine, ptr[i]);
        args[i] = (dnnl_exec_arg_t){arg_kind[i], mem[i]};
    }
    if (s == dnnl_success && scratch_bytes) {
        s = dnnl_memory_create(&mem[n_args], dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0),
                               cpu_engine, scratch);
        args[n_args] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[n_args]};
        n_args++;
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(prim, stream, n_args, args);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
    for (int i = 0; i < 5; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (stream) dnnl_stream_destroy(stream);
    free(scratch);
    return s == dnnl_success ? KILN_OK : dnnl_fail(s, "execution", (kiln__opcode)k->code);
}

bool kiln__conv_dnnl_run(const kiln__op *op, kiln_status *st) {
    kiln__opcode code = op->code;
    if (!dnnl_wanted() || op->out[0].dtype != KILN_F32) return false;
    bool forward = code == KILN__OP_CONV2D, input_grad = code == KILN__OP_CONV2D_BACKWARD_INPUT;
    const kiln__view *x = forward ? &op->in[0] : input_grad ? &op->out[0] : &op->in[1];
    const kiln__view *w = forward || input_grad ? &op->in[1] : &op->out[0];
    const kiln__view *y = forward ? &op->out[0] : &op->in[0];
    for (int i = 0; i < op->n_in + 1; i++) { /* f32 and dense throughout, else the built-in kernel */
        const kiln__view *v = i < op->n_in ? &op->in[i] : &op->out[0];
        if (v->dtype != KILN_F32 || !kiln__view_is_contiguous(v)) return false;
    }
    dnnl_key k = {.code = code, .n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                  .o = w->shape[0], .kh = w->shape[2], .kw = w->shape[3], .oh = y->shape[2], .ow = y->shape[3],
                  .sh = op->p.i[0], .sw = op->p.i[1], .ph = op->p.i[2], .pw = op->p.i[3],
                  .dh = op->pi[0], .dw = op->pi[1], .groups = op->pi[2], .bias = forward && op->n_in > 2};
    if (k.n * k.c * k.h * k.w == 0 || k.o * k.kh * k.kw == 0 || k.oh * k.ow == 0) return false;
    pthread_once(&dnnl_once, dnnl_init);
    if (dnnl_engine_status != dnnl_success) {
        *st = dnnl_fail(dnnl_engine_status, "engine creation", code);
        return true;
    }
    /* one thread budget: the whole pool for the only conv running, one thread otherwise */
    int others = atomic_fetch_add(&dnnl_running, 1);
    k.threads = others > 0 || kiln__pool_in_parallel_region() ? 1 : kiln__pool_threads();
    if (omp_set_threads) omp_set_threads((int)k.threads);
    int slot;
    size_t scratch = 0;
    *st = KILN_OK;
    dnnl_primitive_t prim = acquire(&k, &slot, &scratch, st);
    bool taken = prim || *st != KILN_OK;
    if (prim) {
        int kinds[4];
        void *ptrs[4];
        int n = 0;
        if (forward) {
            kinds[n] = DNNL_ARG_SRC, ptrs[n++] = kiln__view_ptr(x);
            kinds[n] = DNNL_ARG_WEIGHTS, ptrs[n++] = kiln__view_ptr(w);
            if (k.bias) kinds[n] = DNNL_ARG_BIAS, ptrs[n++] = kiln__view_ptr(&op->in[2]);
            kinds[n] = DNNL_ARG_DST, ptrs[n++] = kiln__view_ptr(y);
        } else if (input_grad) {
            kinds[n] = DNNL_ARG_DIFF_DST, ptrs[n++] = kiln__view_ptr(y);
            kinds[n] = DNNL_ARG_WEIGHTS, ptrs[n++] = kiln__view_ptr(w);
            kinds[n] = DNNL_ARG_DIFF_SRC, ptrs[n++] = kiln__view_ptr(x);
        } else {
            kinds[n] = DNNL_ARG_DIFF_DST, ptrs[n++] = kiln__view_ptr(y);
            kinds[n] = DNNL_ARG_SRC, ptrs[n++] = kiln__view_ptr(x);
            kinds[n] = DNNL_ARG_DIFF_WEIGHTS, ptrs[n++] = kiln__view_ptr(w);
        }
        *st = execute(prim, scratch, &k, n, kinds, ptrs);
        atomic_fetch_add(&dnnl_calls, 1);
        release(prim, slot);
    }
    atomic_fetch_sub(&dnnl_running, 1);
    return taken;
}

#else /* !KILN_HAVE_DNNL */

bool kiln__conv_dnnl_run(const kiln__op *op, kiln_status *st) {
    (void)op;
    (void)st;
    return false;
}

const char *kiln__conv_dnnl_mode(void) { return "builtin"; }

void kiln__conv_dnnl_force(int mode) { (void)mode; }

long kiln__conv_dnnl_calls(void) { return 0; }

#endif
