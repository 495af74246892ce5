/* CONV2D, CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT for f32 and bf16 through oneDNN.
 *
 * kiln holds NCHW activations and OIHW (GOIHW when grouped) weights; oneDNN picks its own
 * (blocked) layouts and reorders run around the conv, into and out of buffers of the call's
 * own: oneDNN's, except for bf16 activations in nChw16c, which kiln transposes itself
 * (conv_reorder.c: oneDNN 2.6's bf16 reorder is its generic one, 2-5x slower). The
 * primitives (conv and reorders) are created once per geometry and thread count and
 * kept in a small fixed table (creation costs 0.1-1 ms, a Fashion-MNIST conv 1-10 ms); when
 * the table is full further shapes run uncached. Each call brings its own scratchpad (user
 * scratchpad mode), so two engine workers may run one cached primitive at once.
 *
 * Threads (DESIGN.md section 3, one thread budget): oneDNN here runs on OpenMP. The calling
 * engine worker claims kiln's pool (kiln__pool_try_claim) and sets its own OpenMP thread
 * count before it creates and runs a primitive: kiln__pool_threads() when it holds the pool,
 * 1 when another caller does (a kiln parallel_for, or another oneDNN conv on another engine
 * worker) or when called inside a pool task. While oneDNN holds the pool, kiln's workers
 * sleep on their condition variable and other ops' parallel_for calls run inline on their
 * callers, so two workers never ask for two cores each on a 2-core machine. The thread count
 * is part of the cache key, because some oneDNN implementations fix their work split when
 * the primitive is created. libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT when it loads,
 * before any kiln code runs, so kiln cannot set them; by default its threads spin briefly
 * after each parallel region, then sleep.
 *
 * Default path: oneDNN for f32 convs with at least DNNL_MIN_CHANNELS input channels per
 * group (measured below); KILN_CONV=builtin|dnnl forces one path for every conv. */
#include "backend/cpu/conv_dnnl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_reorder.h"
#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/gemm_lowp.h"

#if KILN_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>

static atomic_int dnnl_forced = -1; /* -1: from KILN_CONV (or the default), 0 built-in, 1 oneDNN */
static atomic_long dnnl_calls, dnnl_bf16_calls, kiln_reorders, blocked_bf16_acts;
static atomic_int env_cached = -1;  /* KILN_CONV read once: 0 builtin, 1 dnnl, 2 unset (auto) */

void kiln__conv_dnnl_force(int mode) {
    if (mode < 0) atomic_store(&env_cached, -1);
    atomic_store(&dnnl_forced, mode < 0 ? -1 : mode != 0);
}

long kiln__conv_dnnl_calls(void) { return atomic_load(&dnnl_calls); }

long kiln__conv_dnnl_bf16_calls(void) { return atomic_load(&dnnl_bf16_calls); }

long kiln__conv_dnnl_kiln_reorders(void) { return atomic_load(&kiln_reorders); }

long kiln__conv_dnnl_blocked_bf16_activations(void) { return atomic_load(&blocked_bf16_acts); }

/* Failure injection for tests (kiln__conv_dnnl_inject_failure): the stage and how many more
 * calls reaching it fail. */
static atomic_int inject_stage, inject_left;

void kiln__conv_dnnl_inject_failure(int stage, int count) {
    atomic_store(&inject_left, count > 0 ? count : 0);
    atomic_store(&inject_stage, count > 0 ? stage : 0);
}

/* True when this call should fail at `stage` (and counts it). */
static bool injected(int stage) {
    if (atomic_load_explicit(&inject_stage, memory_order_relaxed) != stage) return false;
    int left = atomic_load(&inject_left);
    while (left > 0 && !atomic_compare_exchange_weak(&inject_left, &left, left - 1)) {
    }
    return left > 0;
}

static int env_mode(void) {
    atomic_int *cached = &env_cached;
    int m = atomic_load(cached);
    if (m >= 0) return m;
    const char *e = getenv("KILN_CONV");
    m = !e || !*e ? 2 : strcmp(e, "builtin") == 0 ? 0 : strcmp(e, "dnnl") == 0 ? 1 : 2;
    atomic_store(cached, m);
    return m;
}

/* 0 built-in, 1 oneDNN, 2 by the default rule. */
static int dnnl_mode(void) {
    int f = atomic_load(&dnnl_forced);
    return f >= 0 ? f : env_mode();
}

const char *kiln__conv_dnnl_mode(void) {
    int m = dnnl_mode();
    return m == 0 ? "builtin" : m == 1 ? "dnnl" : "auto";
}

/* The default rule, from bench_conv at the Fashion-MNIST CNN's shapes (batch 128, 2 cores,
 * medians of 5 interleaved runs of 15-run medians; runs spread up to 2x with the machine's
 * load): with 32 input channels oneDNN (blocked layouts) took the forward from 16.8 to 5.9 ms
 * and forward+backward from 47.6 to 23.3 ms; with 1 input channel the built-in kernel won
 * (forward 1.29 against 1.87 ms, forward+backward 6.6 against 9.1 ms), its tiny im2col GEMM
 * beating oneDNN's reorders. So oneDNN from 8 input channels per group up; between 1 and 32
 * that threshold is a guess. */
#define DNNL_MIN_CHANNELS 8

/* ---- engine, OpenMP thread count ----------------------------------------------------- */

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t cpu_engine;
static dnnl_status_t dnnl_engine_status;

static void cache_free_all(void);

static void dnnl_init(void) {
    dnnl_engine_status = dnnl_engine_create(&cpu_engine, dnnl_cpu, 0);
    if (dnnl_engine_status == dnnl_success) atexit(cache_free_all);
}

/* ---- primitive cache ----------------------------------------------------------------- */

typedef struct {
    int64_t code, n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups, bias, threads;
    int64_t bf16; /* every operand bf16 (f32 sums of bf16 products), else every one f32 */
} dnnl_key;

/* One conv and, per argument whose layout in the conv is not kiln's, a reorder to it (inputs)
 * or from it (outputs): oneDNN's, or for a bf16 activation in nChw16c kiln's transpose
 * (conv_reorder.h: oneDNN 2.6 reorders bf16 through its generic, 2-5x slower kernel). */
typedef struct {
    dnnl_primitive_t conv;
    dnnl_primitive_t re[4];
    int64_t kiln_re[4][3]; /* n, c, h*w of an activation kiln transposes; n = 0 where it does not */
    bool blocked16[4];     /* a bf16 activation in nChw16c, whoever moves it (tests count them) */
    dnnl_memory_desc_t md[4], user_md[4]; /* the conv's layout, kiln's */
    dnnl_memory_desc_t scratch_md;
    int kinds[4], n;
    size_t scratch;
} dnnl_prims;

typedef struct {
    dnnl_key key;
    dnnl_prims p;
    int users; /* calls running it now; under cache_lock */
    bool used;
} dnnl_entry;

#define CACHE_SIZE 64
static dnnl_entry cache[CACHE_SIZE];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cache_closed;

static void prims_destroy(dnnl_prims *p) {
    if (p->conv) dnnl_primitive_destroy(p->conv);
    for (int i = 0; i < 4; i++)
        if (p->re[i]) dnnl_primitive_destroy(p->re[i]);
    *p = (dnnl_prims){0};
}

/* At exit: destroy what no call is running (a call still running at exit keeps its own). */
static void cache_free_all(void) {
    pthread_mutex_lock(&cache_lock);
    cache_closed = true;
    for (int i = 0; i < CACHE_SIZE; i++)
        if (cache[i].used && cache[i].users == 0) {
            prims_destroy(&cache[i].p);
            cache[i].used = false;
        }
    pthread_mutex_unlock(&cache_lock);
}

static kiln_status dnnl_fail(dnnl_status_t s, const char *what, kiln__opcode code) {
    kiln__kernel_error("oneDNN %s for %s failed: %s", what, kiln__opcode_name(code), dnnl_status2str(s));
    return s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_KERNEL;
}

static dnnl_data_type_t key_type(const dnnl_key *k) { return k->bf16 ? dnnl_bf16 : dnnl_f32; }

/* kiln's layout of one argument of key k's conv: NCHW activations, (G)OIHW weights, bias [O]. */
static dnnl_status_t plain_md(const dnnl_key *k, int arg, dnnl_memory_desc_t *md) {
    dnnl_data_type_t dt = key_type(k);
    dnnl_dims_t xd = {k->n, k->c, k->h, k->w}, yd = {k->n, k->o, k->oh, k->ow}, bd = {k->o};
    dnnl_dims_t gwd = {k->groups, k->o / k->groups, k->c / k->groups, k->kh, k->kw};
    dnnl_dims_t wd = {k->o, k->c / k->groups, k->kh, k->kw};
    switch (arg) {
    case DNNL_ARG_SRC: return dnnl_memory_desc_init_by_tag(md, 4, xd, dt, dnnl_nchw);
    case DNNL_ARG_DST: return dnnl_memory_desc_init_by_tag(md, 4, yd, dt, dnnl_nchw);
    case DNNL_ARG_BIAS: return dnnl_memory_desc_init_by_tag(md, 1, bd, dt, dnnl_a);
    default:
        return k->groups > 1 ? dnnl_memory_desc_init_by_tag(md, 5, gwd, dt, dnnl_goihw)
                             : dnnl_memory_desc_init_by_tag(md, 4, wd, dt, dnnl_oihw);
    }
}

/* The conv's arguments in the order kiln__conv_dnnl_run passes their pointers. */
static int arg_kinds(const dnnl_key *k, int *kinds) {
    int n = 0;
    if (k->code == KILN__OP_CONV2D) {
        kinds[n++] = DNNL_ARG_SRC, kinds[n++] = DNNL_ARG_WEIGHTS;
        if (k->bias) kinds[n++] = DNNL_ARG_BIAS;
        kinds[n++] = DNNL_ARG_DST;
    } else if (k->code == KILN__OP_CONV2D_BACKWARD_INPUT) {
        kinds[n++] = DNNL_ARG_DIFF_DST, kinds[n++] = DNNL_ARG_WEIGHTS, kinds[n++] = DNNL_ARG_DIFF_SRC;
    } else {
        kinds[n++] = DNNL_ARG_DIFF_DST, kinds[n++] = DNNL_ARG_SRC, kinds[n++] = DNNL_ARG_DIFF_WEIGHTS;
    }
    return n;
}

static bool is_output(int arg) { return arg == DNNL_ARG_DST || arg == DNNL_ARG_DIFF_SRC || arg == DNNL_ARG_DIFF_WEIGHTS; }

static int user_arg(int arg) {
    return arg == DNNL_ARG_DIFF_SRC ? DNNL_ARG_SRC : arg == DNNL_ARG_DIFF_DST ? DNNL_ARG_DST
                                                 : arg == DNNL_ARG_DIFF_WEIGHTS ? DNNL_ARG_WEIGHTS : arg;
}

/* oneDNN's own (blocked) layouts with reorders around the conv: 2-3x faster than NCHW at
 * the CNN's conv2 (bench_conv). KILN_DNNL_LAYOUT=plain keeps kiln's layouts, for measuring. */
static int blocked_layout(void) {
    const char *e = getenv("KILN_DNNL_LAYOUT");
    return !e || strcmp(e, "plain") != 0;
}

/* Whether argument `arg` of key k's bf16 conv is an activation oneDNN wants in nChw16c (md) over
 * whole blocks of 16 channels, the layout kiln's transpose (conv_reorder.h) writes; sets its n,
 * c, h*w in dims. The layout is oneDNN's choice per CPU: blocked for its AVX-512 convs, nhwc for
 * its AMX ones (Intel Xeon 6/207), which oneDNN's reorders serve. */
static bool bf16_activation_blocked16(const dnnl_key *k, int arg, const dnnl_memory_desc_t *md, int64_t *dims) {
    int ua = user_arg(arg);
    if (!k->bf16 || (ua != DNNL_ARG_SRC && ua != DNNL_ARG_DST)) return false;
    bool src = ua == DNNL_ARG_SRC;
    int64_t c = src ? k->c : k->o, hw = src ? k->h * k->w : k->oh * k->ow;
    if (c % 16 != 0) return false; /* (padded blocks: oneDNN's reorder) */
    dnnl_dims_t d = {k->n, c, src ? k->h : k->oh, src ? k->w : k->ow};
    dnnl_memory_desc_t blocked;
    if (dnnl_memory_desc_init_by_tag(&blocked, 4, d, dnnl_bf16, dnnl_aBcd16b) != dnnl_success ||
        !dnnl_memory_desc_equal(md, &blocked))
        return false;
    dims[0] = k->n, dims[1] = c, dims[2] = hw;
    return true;
}

/* Whether kiln's transpose moves such an activation: where the CPU has its instructions.
 * KILN_DNNL_REORDER=onednn keeps oneDNN's, for measuring. */
static bool kiln_transposes(const int64_t *dims) {
    const char *e = getenv("KILN_DNNL_REORDER");
    return kiln__conv_reorder_bf16_ok(dims[1]) && !(e && strcmp(e, "onednn") == 0);
}

/* The primitive for key k: NULL with *st = KILN_OK when oneDNN has no implementation for it
 * (the built-in kernel runs it), NULL with an error status when creation failed otherwise. */
static bool create(const dnnl_key *k, dnnl_prims *p, kiln_status *st) {
    dnnl_memory_desc_t x, w, b, y;
    dnnl_dims_t xd = {k->n, k->c, k->h, k->w}, yd = {k->n, k->o, k->oh, k->ow};
    dnnl_dims_t gwd = {k->groups, k->o / k->groups, k->c / k->groups, k->kh, k->kw}, bd = {k->o};
    dnnl_dims_t wd = {k->o, k->c / k->groups, k->kh, k->kw};
    dnnl_dims_t strides = {k->sh, k->sw}, dil = {k->dh - 1, k->dw - 1}, pl = {k->ph, k->pw};
    /* the right/bottom padding that makes the output size come out as kiln's */
    dnnl_dims_t pr = {(k->oh - 1) * k->sh + (k->kh - 1) * k->dh + 1 - k->h - k->ph,
                      (k->ow - 1) * k->sw + (k->kw - 1) * k->dw + 1 - k->w - k->pw};
    bool grouped = k->groups > 1;
    dnnl_data_type_t dt = key_type(k);
    dnnl_format_tag_t act = blocked_layout() ? dnnl_format_tag_any : dnnl_nchw;
    dnnl_format_tag_t wt = blocked_layout() ? dnnl_format_tag_any : grouped ? dnnl_goihw : dnnl_oihw;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&x, 4, xd, dt, act);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&y, 4, yd, dt, act);
    if (s == dnnl_success)
        s = grouped ? dnnl_memory_desc_init_by_tag(&w, 5, gwd, dt, wt)
                    : dnnl_memory_desc_init_by_tag(&w, 4, wd, dt, wt);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&b, 1, bd, dt, dnnl_a);
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
        return false;
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
    *p = (dnnl_prims){0};
    p->n = arg_kinds(k, p->kinds);
    if (s == dnnl_success) {
        const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        p->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
        if (sp) p->scratch_md = *sp;
        s = injected(KILN__DNNL_FAIL_CREATE) ? dnnl_runtime_error : dnnl_primitive_create(&p->conv, pd);
    }
    for (int i = 0; i < p->n && s == dnnl_success; i++) {
        p->md[i] = *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, p->kinds[i]);
        s = plain_md(k, user_arg(p->kinds[i]), &p->user_md[i]);
        if (s != dnnl_success || dnnl_memory_desc_equal(&p->md[i], &p->user_md[i])) continue;
        int64_t dims[3];
        p->blocked16[i] = bf16_activation_blocked16(k, p->kinds[i], &p->md[i], dims);
        if (p->blocked16[i] && kiln_transposes(dims)) {
            memcpy(p->kiln_re[i], dims, sizeof dims);
            continue;
        }
        bool out = is_output(p->kinds[i]);
        dnnl_primitive_desc_t rpd = NULL;
        s = dnnl_reorder_primitive_desc_create(&rpd, out ? &p->md[i] : &p->user_md[i], cpu_engine,
                                               out ? &p->user_md[i] : &p->md[i], cpu_engine, NULL);
        if (s == dnnl_success) s = dnnl_primitive_create(&p->re[i], rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (s == dnnl_success) return true;
    prims_destroy(p);
    *st = s == dnnl_unimplemented ? KILN_OK : dnnl_fail(s, "primitive creation", k->code);
    return false;
}

/* Finds or creates the primitives for k into *p. *slot is their cache index, or -1 when the
 * caller owns (and destroys) uncached ones. False when there are none (*st says why). */
static bool acquire(const dnnl_key *k, dnnl_prims *p, int *slot, kiln_status *st) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++)
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0) {
            cache[i].users++;
            *slot = i;
            *p = cache[i].p;
            pthread_mutex_unlock(&cache_lock);
            return true;
        }
    pthread_mutex_unlock(&cache_lock);
    *slot = -1;
    bool created = create(k, p, st);
    /* the first creations construct oneDNN's lazy statics (see backend-impl.h); a bounded
     * number of registrations covers them */
    static atomic_int registrations;
    if (atomic_fetch_add(&registrations, 1) < 64) kiln__backend_exit_hold_register();
    if (!created) return false;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++) {
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0) break; /* another thread won */
        if (!cache[i].used) {
            cache[i] = (dnnl_entry){.key = *k, .p = *p, .users = 1, .used = true};
            *slot = i;
            break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return true;
}

static void release(dnnl_prims *p, int slot) {
    if (slot < 0) {
        prims_destroy(p);
        return;
    }
    pthread_mutex_lock(&cache_lock);
    cache[slot].users--;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- the kernel ---------------------------------------------------------------------- */

static kiln_status execute(const dnnl_prims *p, const dnnl_key *k, void *const *ptr) {
    dnnl_exec_arg_t args[5];
    dnnl_memory_t mem[5] = {0}, user[4] = {0};
    void *tmp[4] = {0};
    dnnl_stream_t stream = NULL;
    int n = p->n;
    void *scratch = p->scratch ? malloc(p->scratch) : NULL;
    dnnl_status_t s = (p->scratch && !scratch) || injected(KILN__DNNL_FAIL_ALLOC) ? dnnl_out_of_memory : dnnl_success;
    if (s == dnnl_success) s = dnnl_stream_create(&stream, cpu_engine, dnnl_stream_default_flags);
    for (int i = 0; i < n && s == dnnl_success; i++) {
        if (p->blocked16[i]) atomic_fetch_add(&blocked_bf16_acts, 1);
        if (p->kiln_re[i][0]) { /* a bf16 activation kiln transposes into or out of a buffer of its own */
            const int64_t *d = p->kiln_re[i];
            if (!(tmp[i] = malloc(dnnl_memory_desc_get_size(&p->md[i])))) s = dnnl_out_of_memory;
            if (s == dnnl_success) s = dnnl_memory_create(&mem[i], &p->md[i], cpu_engine, tmp[i]);
            if (s == dnnl_success && !is_output(p->kinds[i])) {
                kiln__conv_bf16_to_blocked(ptr[i], tmp[i], d[0], d[1], d[2]);
                atomic_fetch_add(&kiln_reorders, 1);
            }
        } else if (p->re[i]) { /* the conv's layout in a buffer of its own, reordered from or to kiln's */
            s = dnnl_memory_create(&user[i], &p->user_md[i], cpu_engine, ptr[i]);
            if (s == dnnl_success && !(tmp[i] = malloc(dnnl_memory_desc_get_size(&p->md[i])))) s = dnnl_out_of_memory;
            if (s == dnnl_success) s = dnnl_memory_create(&mem[i], &p->md[i], cpu_engine, tmp[i]);
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, mem[i]}};
            if (s == dnnl_success && !is_output(p->kinds[i])) s = dnnl_primitive_execute(p->re[i], stream, 2, ra);
        } else {
            s = dnnl_memory_create(&mem[i], &p->md[i], cpu_engine, ptr[i]);
        }
        args[i] = (dnnl_exec_arg_t){p->kinds[i], mem[i]};
    }
    if (s == dnnl_success && p->scratch) {
        s = dnnl_memory_create(&mem[4], &p->scratch_md, cpu_engine, scratch);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[4]};
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(p->conv, stream, n, args);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
    for (int i = 0; i < p->n && s == dnnl_success; i++)
        if (p->kiln_re[i][0] && is_output(p->kinds[i])) {
            kiln__conv_bf16_from_blocked(tmp[i], ptr[i], p->kiln_re[i][0], p->kiln_re[i][1], p->kiln_re[i][2]);
            atomic_fetch_add(&kiln_reorders, 1);
        }
    for (int i = 0; i < p->n && s == dnnl_success; i++)
        if (p->re[i] && is_output(p->kinds[i])) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, mem[i]}, {DNNL_ARG_TO, user[i]}};
            s = dnnl_primitive_execute(p->re[i], stream, 2, ra);
        }
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
    for (int i = 0; i < 5; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    for (int i = 0; i < 4; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        free(tmp[i]);
    }
    if (stream) dnnl_stream_destroy(stream);
    free(scratch);
    if (s == dnnl_out_of_memory) {
        kiln__kernel_error("out of memory for oneDNN's %s buffers", kiln__opcode_name((kiln__opcode)k->code));
        return KILN_ERR_OUT_OF_MEMORY;
    }
    return s == dnnl_success ? KILN_OK : dnnl_fail(s, "execution", (kiln__opcode)k->code);
}

bool kiln__conv_dnnl_run(const kiln__op *op, kiln_status *st) {
    kiln__opcode code = op->code;
    int mode = dnnl_mode();
    kiln_dtype dt = op->out[0].dtype;
    /* bf16 where oneDNN's bf16 convs use the CPU's AVX512-BF16, as bf16 products do (gemm_lowp.c:
     * KILN_ISA=avx2 or a CPU without it leaves them to conv.c, which widens them to f32) */
    bool bf16 = dt == KILN_BF16 && strcmp(kiln__gemm_lowp_path(KILN_BF16), "dnnl-bf16") == 0;
    if (mode == 0 || (dt != KILN_F32 && !bf16)) return false;
    bool forward = code == KILN__OP_CONV2D, input_grad = code == KILN__OP_CONV2D_BACKWARD_INPUT;
    const kiln__view *x = forward ? &op->in[0] : input_grad ? &op->out[0] : &op->in[1];
    const kiln__view *w = forward || input_grad ? &op->in[1] : &op->out[0];
    const kiln__view *y = forward ? &op->out[0] : &op->in[0];
    for (int i = 0; i < op->n_in + 1; i++) { /* one dtype and dense throughout, else the built-in kernel */
        const kiln__view *v = i < op->n_in ? &op->in[i] : &op->out[0];
        if (v->dtype != dt || !kiln__view_is_contiguous(v)) return false;
    }
    dnnl_key k = {.code = code, .n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                  .o = w->shape[0], .kh = w->shape[2], .kw = w->shape[3], .oh = y->shape[2], .ow = y->shape[3],
                  .sh = op->p.i[0], .sw = op->p.i[1], .ph = op->p.i[2], .pw = op->p.i[3],
                  .dh = op->pi[0], .dw = op->pi[1], .groups = op->pi[2], .bias = forward && op->n_in > 2,
                  .bf16 = bf16};
    if (k.n * k.c * k.h * k.w == 0 || k.o * k.kh * k.kw == 0 || k.oh * k.ow == 0) return false;
    if (mode == 2 && k.c / k.groups < DNNL_MIN_CHANNELS) return false;
    pthread_once(&dnnl_once, dnnl_init);
    if (dnnl_engine_status != dnnl_success) {
        *st = dnnl_fail(dnnl_engine_status, "engine creation", code);
        return true;
    }
    /* one thread budget: oneDNN gets the pool's threads while it holds the pool (other ops
     * then run inline on their callers), one thread when another op or conv holds it */
    int held = kiln__pool_try_claim();
    k.threads = held ? kiln__pool_threads() : 1;
    kiln__dnnl_omp_threads((int)k.threads);
    int slot;
    dnnl_prims p;
    *st = KILN_OK;
    bool taken = acquire(&k, &p, &slot, st);
    if (taken) {
        void *ptrs[4] = {kiln__view_ptr(forward ? x : y), kiln__view_ptr(forward || input_grad ? w : x)};
        if (forward) ptrs[2] = kiln__view_ptr(k.bias ? &op->in[2] : y), ptrs[3] = kiln__view_ptr(y);
        else ptrs[2] = kiln__view_ptr(input_grad ? x : w);
        *st = execute(&p, &k, ptrs);
        atomic_fetch_add(&dnnl_calls, 1);
        if (bf16) atomic_fetch_add(&dnnl_bf16_calls, 1);
        release(&p, slot);
    } else {
        taken = *st != KILN_OK;
    }
    if (held) kiln__pool_unclaim();
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

long kiln__conv_dnnl_bf16_calls(void) { return 0; }

long kiln__conv_dnnl_kiln_reorders(void) { return 0; }

long kiln__conv_dnnl_blocked_bf16_activations(void) { return 0; }

void kiln__conv_dnnl_inject_failure(int stage, int count) {
    (void)stage;
    (void)count;
}

#endif
