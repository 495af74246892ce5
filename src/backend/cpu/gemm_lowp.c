/* bf16/f16 products into f32 (see gemm_lowp.h): oneDNN's bf16 matmul, or widening to f32.
 *
 * Why oneDNN's matmul primitive and not dnnl_sgemm's tiles (gemm_dnnl.c): oneDNN 2.6 has no
 * public bf16 GEMM call, only the primitive, whose creation costs 0.1-1 ms. So primitives are
 * kept per shape (sizes, leading dims, transposes, accumulate, threads) in a small fixed table,
 * as conv_dnnl.c keeps its convs; shapes past the table run uncached. Threads (DESIGN.md
 * section 3, one budget): tiles on kiln's pool, one oneDNN thread each (below).
 *
 * B packed once per product (gemm_packed): a product of at least two 64-row tiles per pool
 * thread reorders B once into the layout oneDNN's matmul asks for (weights of format "any"),
 * its column blocks spread over the pool, and then runs row tiles that all read that copy; a
 * smaller one (or one accumulating into C) runs tiles that each pack their own slice of B. A
 * 2048 x 2048 x 2048 product on 2 threads: 933-950 GFLOP/s packed once against 880-895 in
 * 1024 x 1024 tiles each packing (AMD EPYC Zen 5, loaded, 2026-11-29; BENCHMARKS.md). The
 * packed copy's buffer is kept for the next product (up to SPARE_MAX), so its pages are mapped
 * once. The reorder itself is kiln's (gemm_lowp_pack.c: 0.06 ms per 2048 x 512 slice where
 * oneDNN's took 0.30) wherever oneDNN's layout is the pair-interleaved one it writes and B is not
 * transposed, oneDNN's reorder otherwise; the bits are the same. The packed copy's buffer, on
 * 2 MiB pages from that size on, is gemm_lowp_buf.c's. KILN_GEMM_BF16_PACK=0|1,
 * KILN_GEMM_BF16_ROWS and _COLS (the tiles' size) are for measuring. */
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
#include "backend/cpu/gemm_lowp_buf.h"
#include "backend/cpu/gemm_lowp_pack.h"
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

/* kind: a product with B as stored (MM_PLAIN), with B in oneDNN's own layout (MM_PACKED), or the
 * reorder of a k x m slice of B into that layout (PACK_B: n, k, ldb, tb say which) */
enum { MM_PLAIN, MM_PACKED, PACK_B };

typedef struct {
    int64_t kind, m, n, k, lda, ldb, ldc, ta, tb, accumulate, c_bf16, threads;
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
    kiln__lowp_packed_free_spare();
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

/* The reorder of B's slice (k x key->m, as stored) into `to`, the packed layout's slice */
static dnnl_status_t create_pack(const mm_key *k, const dnnl_memory_desc_t *to, mm_entry *e) {
    dnnl_memory_desc_t from;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = strided_md(&from, k->k, k->m, k->ldb, k->tb, dnnl_bf16);
    if (s == dnnl_success) s = dnnl_reorder_primitive_desc_create(&pd, &from, engine, to, engine, NULL);
    if (s == dnnl_success) {
        e->md[0] = from, e->md[1] = *to, e->scratch = 0;
        s = dnnl_primitive_create(&e->prim, pd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    return s;
}

static dnnl_status_t create(const mm_key *k, const dnnl_memory_desc_t *to, mm_entry *e) {
    if (k->kind == PACK_B) return create_pack(k, to, e);
    dnnl_memory_desc_t a, b, c;
    dnnl_status_t s = strided_md(&a, k->m, k->k, k->lda, k->ta, dnnl_bf16);
    if (s == dnnl_success && k->kind == MM_PACKED) { /* oneDNN picks the layout */
        dnnl_dims_t dims = {k->k, k->n};
        s = dnnl_memory_desc_init_by_tag(&b, 2, dims, dnnl_bf16, dnnl_format_tag_any);
    } else if (s == dnnl_success)
        s = strided_md(&b, k->k, k->n, k->ldb, k->tb, dnnl_bf16);
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
        e->md[0] = a, e->md[1] = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), e->md[2] = c;
        s = dnnl_primitive_create(&e->prim, pd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s;
}

/* The cached entry for k (users counted) into *e and its slot, or an uncached one (slot -1). */
static dnnl_status_t acquire(const mm_key *k, const dnnl_memory_desc_t *to, mm_entry *e, int *slot) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++)
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0 && (!to || dnnl_memory_desc_equal(&cache[i].md[1], to))) {
            cache[i].users++;
            *slot = i;
            *e = cache[i];
            pthread_mutex_unlock(&cache_lock);
            return dnnl_success;
        }
    pthread_mutex_unlock(&cache_lock);
    *slot = -1;
    *e = (mm_entry){.key = *k};
    dnnl_status_t s = create(k, to, e);
    static atomic_int registrations; /* oneDNN's lazy statics: see backend-impl.h */
    if (atomic_fetch_add(&registrations, 1) < 64) kiln__backend_exit_hold_register();
    if (s != dnnl_success) return s;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SIZE && !cache_closed; i++) {
        if (cache[i].used && memcmp(&cache[i].key, k, sizeof *k) == 0 && (!to || dnnl_memory_desc_equal(&cache[i].md[1], to)))
            break; /* another thread won */
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

/* A product (a, b, c: src, weights, dst) or a reorder (a, b: from, to; c unused). */
static dnnl_status_t execute(const mm_entry *e, const void *a, const void *b, void *c) {
    void *scratch = e->scratch ? malloc(e->scratch) : NULL;
    if (e->scratch && !scratch) return dnnl_out_of_memory;
    dnnl_memory_t mem[4] = {0};
    dnnl_stream_t stream = NULL;
    void *ptr[4] = {(void *)a, (void *)b, c, scratch};
    int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD}, n = e->scratch ? 4 : 3;
    if (e->key.kind == PACK_B) kinds[0] = DNNL_ARG_FROM, kinds[1] = DNNL_ARG_TO, n = 2;
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
 * Each call packs its slice of B (k x tile_cols), so columns are split first (up to two tiles
 * per pool thread, at least TILE_COLS_MIN wide: every slice of B packed once in all), then rows
 * as many as still give each thread two tiles, at least TILE_ROWS_MIN. */
#define TILE_ROWS_MIN 256
#define TILE_ROWS_MAX 8192
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
        mm_key key = {.kind = MM_PLAIN, .m = rows, .n = cols, .k = j->k, .lda = j->lda, .ldb = j->ldb, .ldc = j->ldc, .ta = j->ta,
                      .tb = j->tb, .accumulate = j->accumulate, .c_bf16 = j->c_dt == KILN_BF16, .threads = 1};
        mm_entry e;
        int slot;
        dnnl_status_t s = acquire(&key, NULL, &e, &slot);
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

/* KILN_GEMM_BF16_ROWS / _COLS: a tile height / width for every product, for measuring; 0 unset */
static int64_t env_size(const char *name, _Atomic int64_t *cached) {
    int64_t v = atomic_load_explicit(cached, memory_order_relaxed);
    if (v < 0) {
        v = kiln__env_int_range(name, 16, 65536, 0);
        atomic_store_explicit(cached, v, memory_order_relaxed);
    }
    return v;
}

/* KILN_GEMM_BF16_PACK: 1 packs B once per product, 0 never; unset: the rule */
static bool packed_wanted(int64_t m, int64_t n, int64_t threads) {
    static _Atomic int64_t user = -1;
    int64_t v = atomic_load_explicit(&user, memory_order_relaxed);
    if (v < 0) {
        v = kiln__env_int_range("KILN_GEMM_BF16_PACK", 0, 1, 2);
        atomic_store_explicit(&user, v, memory_order_relaxed);
    }
    if (v != 2) return v == 1;
    return m >= 2 * threads * 64 && n >= TILE_COLS_MIN;
}

static void plan_tiles(int64_t m, int64_t n, int64_t *tile_rows, int64_t *tile_cols) {
    static _Atomic int64_t user_rows = -1, user_cols = -1;
    int64_t threads = kiln__pool_threads() > 0 ? kiln__pool_threads() : 1, want = 2 * threads;
    int64_t col_tiles = n / TILE_COLS_MIN < 1 ? 1 : n / TILE_COLS_MIN > want ? want : n / TILE_COLS_MIN;
    int64_t cols = ((n + col_tiles - 1) / col_tiles + 63) / 64 * 64;
    col_tiles = (n + cols - 1) / cols;
    int64_t row_tiles = (want + col_tiles - 1) / col_tiles;
    int64_t rows = ((m + row_tiles - 1) / row_tiles + 63) / 64 * 64;
    rows = rows < TILE_ROWS_MIN ? TILE_ROWS_MIN : rows > TILE_ROWS_MAX ? TILE_ROWS_MAX : rows;
    *tile_rows = env_size("KILN_GEMM_BF16_ROWS", &user_rows) ? env_size("KILN_GEMM_BF16_ROWS", &user_rows) : rows;
    *tile_cols = env_size("KILN_GEMM_BF16_COLS", &user_cols) ? env_size("KILN_GEMM_BF16_COLS", &user_cols) : cols;
}

/* ---- B packed once per product, shared by the row tiles ----------------------------------- */

typedef struct {
    const mm_entry *mm[2]; /* full row tiles, the last one */
    dnnl_memory_desc_t chunk_md[2]; /* a slice of chunk_cols columns of the packed B; the last one */
    int64_t m, k, n, ta, tb, lda, ldb, ldc, tile_rows, chunk_cols, col_block, col_stride;
    bool zero_pad;
    bool own_pack; /* B moved by kiln__gemm_bf16_pack_pairs (gemm_lowp_pack.h), not oneDNN's reorder */
    kiln__bf16_pairs pairs;
    const uint16_t *a, *b;
    char *c, *packed;
    kiln_dtype c_dt;
    _Atomic kiln_status status;
} packed_job;

static void fail_job(_Atomic kiln_status *status, kiln_status st) {
    kiln_status ok = KILN_OK;
    if (st != KILN_OK) atomic_compare_exchange_strong(status, &ok, st);
}

/* Column chunks [begin, end) of B reordered into the packed buffer. */
static void pack_task(void *ctx, int64_t begin, int64_t end) {
    packed_job *j = ctx;
    kiln__dnnl_omp_threads(1);
    for (int64_t t = begin; t < end; t++) {
        int64_t j0 = t * j->chunk_cols, cols = j->n - j0 < j->chunk_cols ? j->n - j0 : j->chunk_cols;
        bool last = cols != j->chunk_cols;
        char *to = j->packed + j0 / j->col_block * j->col_stride * (int64_t)sizeof(uint16_t);
        if (j->zero_pad) memset(to, 0, (size_t)((cols + j->col_block - 1) / j->col_block * j->col_stride) * sizeof(uint16_t));
        if (j->own_pack) {
            kiln__gemm_bf16_pack_pairs(j->b, j->ldb, j->k, j0, cols, (uint16_t *)j->packed, &j->pairs);
            continue;
        }
        mm_key key = {.kind = PACK_B, .m = cols, .n = j->n, .k = j->k, .ldb = j->ldb, .tb = j->tb, .threads = 1};
        mm_entry e;
        int slot;
        dnnl_status_t s = acquire(&key, &j->chunk_md[last], &e, &slot);
        if (s == dnnl_success) {
            s = execute(&e, j->b + (j->tb ? j0 * j->ldb : j0), to, NULL);
            release(&e, slot);
        }
        if (s != dnnl_success) fail_job(&j->status, dnnl_fail(s, "packing B"));
    }
}

static void packed_rows_task(void *ctx, int64_t begin, int64_t end) {
    packed_job *j = ctx;
    kiln__dnnl_omp_threads(1);
    for (int64_t t = begin; t < end && atomic_load(&j->status) == KILN_OK; t++) {
        int64_t i0 = t * j->tile_rows;
        const mm_entry *e = j->mm[j->m - i0 < j->tile_rows];
        char *c = j->c + i0 * j->ldc * (int64_t)kiln__elsize(j->c_dt);
        dnnl_status_t s = execute(e, j->a + (j->ta ? i0 : i0 * j->lda), j->packed, c);
        if (s != dnnl_success) fail_job(&j->status, dnnl_fail(s, "execution"));
    }
}

/* The packed layout's column block and the stride between column blocks, when columns are its
 * outermost blocked dimension (so a chunk of whole column blocks is one contiguous run). */
static bool column_blocks(const dnnl_memory_desc_t *md, int64_t *block, int64_t *stride) {
    if (md->format_kind != dnnl_blocked || md->ndims != 2) return false;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    *block = 1;
    for (int i = 0; i < bd->inner_nblks; i++)
        if (bd->inner_idxs[i] == 1) *block *= bd->inner_blks[i];
    *stride = bd->strides[1];
    return bd->strides[1] >= bd->strides[0] && md->offset0 == 0;
}

/* The layout as kiln__gemm_bf16_pack_pairs writes it: rows in pairs inside row blocks inside
 * column blocks (inner blocks k/2, n, 2 over dims 0, 1, 0: BA16a64b2a and its kin). */
static bool pair_layout(const dnnl_memory_desc_t *md, kiln__bf16_pairs *out) {
    if (md->format_kind != dnnl_blocked || md->ndims != 2 || md->data_type != dnnl_bf16) return false;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    if (bd->inner_nblks != 3 || bd->inner_idxs[0] != 0 || bd->inner_idxs[1] != 1 || bd->inner_idxs[2] != 0 ||
        bd->inner_blks[2] != 2)
        return false;
    *out = (kiln__bf16_pairs){.k_block = 2 * bd->inner_blks[0], .n_block = bd->inner_blks[1], .k_stride = bd->strides[0],
                              .n_stride = bd->strides[1]};
    return out->k_stride % 2 == 0 && out->n_stride % 2 == 0 && kiln__gemm_bf16_pack_ok(out);
}

/* The product with B reordered once into oneDNN's layout (pack_task, its columns spread over the
 * pool) and row tiles reading it (packed_rows_task): B is packed once, not once per row tile.
 * *taken false when oneDNN's layout does not split by columns (the caller tiles instead). */
static kiln_status gemm_packed(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                               const uint16_t *b, int64_t ldb, kiln_dtype c_dt, void *c, int64_t ldc, int64_t tile_rows,
                               bool *taken) {
    *taken = false;
    kiln__dnnl_omp_threads(1); /* the primitives are made here: for one thread each */
    int64_t last_rows = m % tile_rows ? m % tile_rows : tile_rows;
    mm_key key = {.kind = MM_PACKED, .m = tile_rows, .n = n, .k = k, .lda = lda, .ldc = ldc, .ta = ta,
                  .c_bf16 = c_dt == KILN_BF16, .threads = 1};
    mm_entry e[2];
    int slot[2] = {-1, -1}, have = 0;
    dnnl_status_t s = acquire(&key, NULL, &e[0], &slot[0]);
    if (s == dnnl_success) have = 1, key.m = last_rows, s = acquire(&key, NULL, &e[1], &slot[1]);
    if (s == dnnl_success) have = 2;
    packed_job j = {.mm = {&e[0], &e[1]}, .m = m, .k = k, .n = n, .ta = ta, .tb = tb, .lda = lda, .ldb = ldb,
                    .ldc = ldc, .tile_rows = tile_rows, .a = a, .b = b, .c = c, .c_dt = c_dt, .status = KILN_OK};
    const dnnl_memory_desc_t *w = &e[0].md[1];
    if (have == 2 && dnnl_memory_desc_equal(w, &e[1].md[1]) && column_blocks(w, &j.col_block, &j.col_stride)) {
        int64_t threads = kiln__pool_threads() > 0 ? kiln__pool_threads() : 1, chunks = 2 * threads;
        j.chunk_cols = ((n + chunks - 1) / chunks + j.col_block - 1) / j.col_block * j.col_block;
        chunks = (n + j.chunk_cols - 1) / j.chunk_cols;
        j.zero_pad = w->padded_dims[0] != w->dims[0] || w->padded_dims[1] != w->dims[1];
        j.own_pack = !tb && pair_layout(w, &j.pairs);
        for (int l = 0; l < 2; l++) { /* the whole layout narrowed to a chunk's columns, from its start */
            int64_t cols = l ? n - (chunks - 1) * j.chunk_cols : j.chunk_cols;
            j.chunk_md[l] = *w;
            j.chunk_md[l].dims[1] = cols;
            j.chunk_md[l].padded_dims[1] = (cols + j.col_block - 1) / j.col_block * j.col_block;
        }
        size_t bytes = dnnl_memory_desc_get_size(w);
        j.packed = kiln__lowp_packed_take(bytes);
        if (j.packed) {
            *taken = true;
            kiln__parallel_for(chunks, 1, pack_task, &j);
            if (atomic_load(&j.status) == KILN_OK) kiln__parallel_for((m + tile_rows - 1) / tile_rows, 1, packed_rows_task, &j);
            kiln__lowp_packed_give(j.packed);
        }
    }
    for (int i = 0; i < have; i++) release(&e[i], slot[i]);
    if (!*taken && s != dnnl_success && s != dnnl_unimplemented && s != dnnl_invalid_arguments)
        return *taken = true, dnnl_fail(s, "creation");
    return atomic_load(&j.status);
}

static kiln_status gemm_dnnl(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                             const uint16_t *b, int64_t ldb, int accumulate, kiln_dtype c_dt, void *c, int64_t ldc,
                             bool *taken) {
    pthread_once(&engine_once, engine_init);
    *taken = engine_status == dnnl_success;
    if (!*taken) return KILN_OK;
    int64_t threads = kiln__pool_threads() > 0 ? kiln__pool_threads() : 1;
    if (!accumulate && packed_wanted(m, n, threads)) {
        int64_t rows = ((m + 2 * threads - 1) / (2 * threads) + 63) / 64 * 64;
        kiln_status st = gemm_packed(ta, tb, m, n, k, a, lda, b, ldb, c_dt, c, ldc, rows, taken);
        if (*taken) return st;
        *taken = true;
    }
    int64_t tile_rows, tile_cols;
    plan_tiles(m, n, &tile_rows, &tile_cols);
    int64_t col_tiles = (n + tile_cols - 1) / tile_cols;
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
