/* bf16/f16 products into f32 (see gemm_lowp.h): oneDNN's bf16 matmul, or widening to f32.
 *
 * Why oneDNN's matmul primitive and not dnnl_sgemm's tiles (gemm_dnnl.c): oneDNN 2.6 has no
 * public bf16 GEMM call, only the primitive, whose creation costs 0.1-1 ms. So primitives are
 * kept per shape (sizes, leading dims, transposes, accumulate, threads) in a small fixed table,
 * as conv_dnnl.c keeps its convs; shapes past the table run uncached. Threads (DESIGN.md
 * section 3, one budget): tiles on kiln's pool, one oneDNN thread each (below). */
#include "backend/cpu/gemm_lowp.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/vmath.h"

static atomic_int forced = -1;

void kiln__gemm_lowp_force(int mode) { atomic_store(&forced, mode < 0 ? -1 : mode != 0); }

/* AVX512_BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5 (read directly: older compilers' cpu
 * feature builtins do not know the name) */
static bool cpu_has_bf16(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u);
#else
    return false;
#endif
}

static bool dnnl_path(kiln_dtype dt) {
    if (!KILN_HAVE_DNNL || dt != KILN_BF16 || atomic_load_explicit(&forced, memory_order_relaxed) == 0) return false;
    return strcmp(kiln__vmath_isa(), "avx512") == 0 && cpu_has_bf16();
}

const char *kiln__gemm_lowp_path(kiln_dtype dt) { return dnnl_path(dt) ? "dnnl-bf16" : "convert-f32"; }

/* ---- conversion path ------------------------------------------------------------------ */

/* op(X) (rows x cols, stored with leading dim ld, transposed when trans) as dense f32. */
static float *widen(kiln_dtype dt, int trans, int64_t rows, int64_t cols, const uint16_t *x, int64_t ld) {
    float *out = malloc((size_t)(rows * cols) * sizeof(float) + 1);
    if (!out) return NULL;
    for (int64_t i = 0; i < rows; i++) {
        float *o = out + i * cols;
        if (dt == KILN_BF16 && !trans) { /* the hot case: a shift the compiler vectorises */
            const uint16_t *r = x + i * ld;
            for (int64_t j = 0; j < cols; j++) {
                uint32_t u = (uint32_t)r[j] << 16;
                memcpy(&o[j], &u, sizeof u);
            }
        } else {
            for (int64_t j = 0; j < cols; j++) {
                uint16_t h = trans ? x[j * ld + i] : x[i * ld + j];
                o[j] = dt == KILN_BF16 ? kiln__bf16_to_f32(h) : kiln__f16_to_f32(h);
            }
        }
    }
    return out;
}

static kiln_status gemm_widened(kiln_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                                int64_t lda, const uint16_t *b, int64_t ldb, int accumulate, kiln_dtype c_dt, void *c,
                                int64_t ldc) {
    float *fa = widen(dt, ta, m, k, a, lda), *fb = fa ? widen(dt, tb, k, n, b, ldb) : NULL;
    float *fc = fb && c_dt != KILN_F32 ? malloc((size_t)(m * n) * sizeof(float) + 1) : (float *)c;
    if (!fb || !fc) {
        free(fa), free(fb);
        kiln__kernel_error("out of memory widening a %lld x %lld x %lld %s matmul to f32", (long long)m, (long long)n,
                           (long long)k, kiln_dtype_name(dt));
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int64_t ldf = c_dt == KILN_F32 ? ldc : n;
    kiln__gemm_f32(0, 0, m, n, k, 1.0f, fa, k > 1 ? k : 1, fb, n > 1 ? n : 1, accumulate ? 1.0f : 0.0f, fc, ldf);
    if (c_dt != KILN_F32) { /* rounded once into a C of the operands' dtype */
        for (int64_t i = 0; i < m; i++) {
            uint16_t *row = (uint16_t *)c + i * ldc;
            for (int64_t j = 0; j < n; j++)
                row[j] = c_dt == KILN_BF16 ? kiln__f32_to_bf16(fc[i * n + j]) : kiln__f32_to_f16(fc[i * n + j]);
        }
        free(fc);
    }
    free(fa);
    free(fb);
    return KILN_OK;
}

#if KILN_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>

typedef struct {
    int64_t m, n, k, lda, ldb, ldc, ta, tb, accumulate, c_bf16, threads;
} mm_key; /* threads: 1 (a primitive may fix its work split for its thread count) */

typedef struct {
    mm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t md[4]; /* src, weights, dst, scratchpad */
    size_t scratch;
    int users;
    bool used;
} mm_entry;

#define CACHE_SIZE 64
static mm_entry cache[CACHE_SIZE];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cache_closed;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;

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

static void engine_init(void) {
    engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0);
    if (engine_status == dnnl_success) atexit(cache_free_all);
}

static kiln_status dnnl_fail(dnnl_status_t s, const char *what) {
    kiln__kernel_error("oneDNN bf16 matmul %s failed: %s", what, dnnl_status2str(s));
    return s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_KERNEL;
}

/* A [rows, cols] matrix at leading dim ld, read transposed when trans (stored [cols, rows]). */
static dnnl_status_t strided_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld, int64_t trans,
                                dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static dnnl_status_t create(const mm_key *k, mm_entry *e) {
    dnnl_memory_desc_t a, b, c;
    dnnl_status_t s = strided_md(&a, k->m, k->k, k->lda, k->ta, dnnl_bf16);
    if (s == dnnl_success) s = strided_md(&b, k->k, k->n, k->ldb, k->tb, dnnl_bf16);
    if (s == dnnl_success) s = strided_md(&c, k->m, k->n, k->ldc, 0, k->c_bf16 ? dnnl_bf16 : dnnl_f32);
    dnnl_matmul_desc_t desc;
    if (s == dnnl_success) s = dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && k->accumulate) { /* C += A B: oneDNN's sum post-op reads the old C */
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) s = dnnl_post_ops_append_sum(po, 1.0f);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
    if (s == dnnl_success) {
        const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
        if (sp) e->md[3] = *sp;
        e->md[0] = a, e->md[1] = b, e->md[2] = c;
        s = dnnl_primitive_create(&e->prim, pd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s;
}

/* The cached entry for k (users counted) into *e and its slot, or an uncached one (slot -1). */
static dnnl_status_t acquire(const mm_key *k, mm_entry *e, int *slot) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++)
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0) {
            cache[i].users++;
            *slot = i;
            *e = cache[i];
            pthread_mutex_unlock(&cache_lock);
            return dnnl_success;
        }
    pthread_mutex_unlock(&cache_lock);
    *slot = -1;
    *e = (mm_entry){.key = *k};
    dnnl_status_t s = create(k, e);
    static atomic_int registrations; /* oneDNN's lazy statics: see backend-impl.h */
    if (atomic_fetch_add(&registrations, 1) < 64) kiln__backend_exit_hold_register();
    if (s != dnnl_success) return s;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++) {
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0) break; /* another thread won */
        if (!cache[i].used) {
            cache[i] = *e;
            cache[i].users = 1;
            cache[i].used = true;
            *slot = i;
            break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return dnnl_success;
}

static void release(mm_entry *e, int slot) {
    if (slot < 0) {
        dnnl_primitive_destroy(e->prim);
        return;
    }
    pthread_mutex_lock(&cache_lock);
    cache[slot].users--;
    pthread_mutex_unlock(&cache_lock);
}

static dnnl_status_t execute(const mm_entry *e, const void *a, const void *b, void *c) {
    void *scratch = e->scratch ? malloc(e->scratch) : NULL;
    if (e->scratch && !scratch) return dnnl_out_of_memory;
    dnnl_memory_t mem[4] = {0};
    dnnl_stream_t stream = NULL;
    void *ptr[4] = {(void *)a, (void *)b, c, scratch};
    int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD}, n = e->scratch ? 4 : 3;
    dnnl_exec_arg_t args[4];
    dnnl_status_t s = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    for (int i = 0; i < n && s == dnnl_success; i++) {
        s = dnnl_memory_create(&mem[i], &e->md[i], engine, ptr[i]);
        args[i] = (dnnl_exec_arg_t){kinds[i], mem[i]};
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, stream, n, args);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
    for (int i = 0; i < 4; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (stream) dnnl_stream_destroy(stream);
    free(scratch);
    return s;
}

/* One product split in tiles (tile_rows rows by tile_cols columns), each one single-threaded
 * primitive call on a pool thread, as gemm_dnnl.c runs dnnl_sgemm: the pool's threads are the
 * only ones, so no OpenMP team spins beside kiln's work (one OpenMP team per product, when
 * another op held the pool, left the product on one thread and the casts beside it waiting).
 * Each call packs its slice of B again (k x tile_cols), a cost its rows amortise: rows are as
 * many as still give each thread two tiles, 256 to 1024 (a 2048 x 2048 product on 2 threads:
 * 512-row tiles, 953 GFLOP/s against 921 with 256, AMD EPYC Zen 5, 2026-11-29). */
#define TILE_ROWS_MIN 256
#define TILE_ROWS_MAX 1024
#define TILE_COLS_MIN 256

typedef struct {
    int ta, tb, accumulate;
    kiln_dtype c_dt;
    int64_t m, n, k, lda, ldb, ldc, tile_rows, tile_cols, col_tiles;
    const uint16_t *a, *b;
    char *c;
    _Atomic kiln_status status;
} tiles_job;

static void tiles_task(void *ctx, int64_t begin, int64_t end) {
    tiles_job *j = ctx;
    kiln__dnnl_omp_threads(1);
    for (int64_t t = begin; t < end; t++) {
        int64_t i0 = t / j->col_tiles * j->tile_rows, j0 = t % j->col_tiles * j->tile_cols;
        int64_t rows = j->m - i0 < j->tile_rows ? j->m - i0 : j->tile_rows;
        int64_t cols = j->n - j0 < j->tile_cols ? j->n - j0 : j->tile_cols;
        const uint16_t *a = j->a + (j->ta ? i0 : i0 * j->lda), *b = j->b + (j->tb ? j0 * j->ldb : j0);
        char *c = j->c + (i0 * j->ldc + j0) * (int64_t)kiln__elsize(j->c_dt);
        mm_key key = {.m = rows, .n = cols, .k = j->k, .lda = j->lda, .ldb = j->ldb, .ldc = j->ldc, .ta = j->ta,
                      .tb = j->tb, .accumulate = j->accumulate, .c_bf16 = j->c_dt == KILN_BF16, .threads = 1};
        mm_entry e;
        int slot;
        dnnl_status_t s = acquire(&key, &e, &slot);
        if (s == dnnl_success) {
            s = execute(&e, a, b, c);
            release(&e, slot);
        }
        kiln_status st = KILN_OK;
        if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) /* this tile widened to f32 */
            st = gemm_widened(KILN_BF16, j->ta, j->tb, rows, cols, j->k, a, j->lda, b, j->ldb, j->accumulate, j->c_dt,
                              c, j->ldc);
        else if (s != dnnl_success)
            st = dnnl_fail(s, "execution");
        kiln_status ok = KILN_OK;
        if (st != KILN_OK) atomic_compare_exchange_strong(&j->status, &ok, st);
    }
}

static kiln_status gemm_dnnl(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                             const uint16_t *b, int64_t ldb, int accumulate, kiln_dtype c_dt, void *c, int64_t ldc,
                             bool *taken) {
    pthread_once(&engine_once, engine_init);
    *taken = engine_status == dnnl_success;
    if (!*taken) return KILN_OK;
    int64_t tile_cols = n < TILE_COLS_MIN ? n : ((n + 1) / 2 + 63) / 64 * 64, col_tiles = (n + tile_cols - 1) / tile_cols;
    int64_t threads = kiln__pool_threads() > 0 ? kiln__pool_threads() : 1;
    int64_t row_tiles_wanted = (2 * threads + col_tiles - 1) / col_tiles; /* two tiles per thread */
    int64_t tile_rows = ((m + row_tiles_wanted - 1) / row_tiles_wanted + 63) / 64 * 64;
    tile_rows = tile_rows < TILE_ROWS_MIN ? TILE_ROWS_MIN : tile_rows > TILE_ROWS_MAX ? TILE_ROWS_MAX : tile_rows;
    tiles_job j = {.ta = ta != 0, .tb = tb != 0, .accumulate = accumulate != 0, .m = m, .n = n, .k = k, .lda = lda,
                   .ldb = ldb, .ldc = ldc, .tile_rows = tile_rows, .tile_cols = tile_cols, .col_tiles = col_tiles,
                   .a = a, .b = b, .c_dt = c_dt, .c = c, .status = KILN_OK};
    kiln__parallel_for((m + tile_rows - 1) / tile_rows * col_tiles, 1, tiles_task, &j);
    return atomic_load(&j.status);
}

#else

static kiln_status gemm_dnnl(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                             const uint16_t *b, int64_t ldb, int accumulate, kiln_dtype c_dt, void *c, int64_t ldc,
                             bool *taken) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)accumulate;
    (void)c_dt, (void)c, (void)ldc;
    *taken = false;
    return KILN_OK;
}

#endif

kiln_status kiln__gemm_lowp(kiln_dtype dt, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                            int64_t lda, const uint16_t *b, int64_t ldb, int accumulate, kiln_dtype c_dt, void *c,
                            int64_t ldc) {
    if (m <= 0 || n <= 0) return KILN_OK;
    if (NEVER((c_dt != KILN_F32 && (c_dt != dt || accumulate)))) return KILN_ERR_INTERNAL;
    size_t es = kiln__elsize(c_dt);
    if (k <= 0) { /* nothing to sum: C stays, or becomes 0 */
        for (int64_t i = 0; i < m && !accumulate; i++) memset((char *)c + i * ldc * (int64_t)es, 0, (size_t)n * es);
        return KILN_OK;
    }
    if (dnnl_path(dt)) {
        bool taken;
        kiln_status st = gemm_dnnl(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c_dt, c, ldc, &taken);
        if (taken) return st;
    }
    return gemm_widened(dt, trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c_dt, c, ldc);
}
