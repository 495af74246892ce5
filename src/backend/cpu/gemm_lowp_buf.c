/* The packed B's buffer (gemm_lowp_buf.h), kept for the next product so its pages are mapped
 * once.
 *
 * Why 2 MiB pages (DESIGN.md section 3): oneDNN's brgemm kernel reads the packed layout
 * (BA16a64b2a: 32 rows of k by 64 columns, 4 KiB, then the next 32 rows) one 4 KiB block after
 * another, so on 4 KiB pages every block is a new page and a TLB miss; a 2048 x 2048 B (8 MiB)
 * is 2048 pages, or 4 huge ones. A 2048 bf16 product on the Intel Xeon family 6 model 207 (AMX,
 * oneDNN 2.6.3's brg:avx512_core_amx_bf16) took 7-10% less CPU on huge pages, median of 10-12
 * alternated rounds (BENCHMARKS.md). The page size is x86-64's transparent huge page, as the
 * MiniLM weights' (bert_load.c); madvise is a hint: where the kernel grants none, the pages stay
 * 4 KiB and nothing else changes. KILN_GEMM_BF16_HUGE=0 turns it off, for measuring. */
#include "backend/cpu/gemm_lowp_buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/core-impl.h"

/* The packed B: one buffer kept for the next product (its pages already mapped), taken by one
 * product at a time; another product meanwhile gets its own. */
static struct {
    pthread_mutex_t lock;
    void *ptr;
    size_t size;
    bool busy;
} spare = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define SPARE_MAX ((size_t)64 << 20) /* a larger B gets a buffer of its own, freed after */
#define HUGE_PAGE ((size_t)2 << 20)

/* KILN_GEMM_BF16_HUGE: 1 asks 2 MiB pages for a packed B of at least one such page, 0 never */
static bool huge_wanted(size_t size) {
    static _Atomic int64_t user = -1;
    int64_t v = atomic_load_explicit(&user, memory_order_relaxed);
    if (v < 0) {
        v = kiln__env_int_range("KILN_GEMM_BF16_HUGE", 0, 1, 1);
        atomic_store_explicit(&user, v, memory_order_relaxed);
    }
    return v == 1 && size >= HUGE_PAGE;
}

static void *packed_alloc(size_t size) {
    if (!huge_wanted(size)) return aligned_alloc(64, size);
    size = (size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, size);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, size, MADV_HUGEPAGE); /* a hint: without it the pages are 4 KiB */
#endif
    return p;
}

void *kiln__lowp_packed_take(size_t size) {
    size = (size + 63) / 64 * 64;
    if (size > SPARE_MAX) return packed_alloc(size);
    pthread_mutex_lock(&spare.lock);
    void *p = NULL;
    if (!spare.busy && spare.size < size) {
        free(spare.ptr);
        spare.ptr = packed_alloc(size);
        spare.size = spare.ptr ? size : 0;
    }
    if (!spare.busy && spare.ptr) p = spare.ptr, spare.busy = true;
    pthread_mutex_unlock(&spare.lock);
    return p ? p : packed_alloc(size);
}

void kiln__lowp_packed_free_spare(void) {
    pthread_mutex_lock(&spare.lock);
    if (!spare.busy) free(spare.ptr), spare.ptr = NULL, spare.size = 0;
    pthread_mutex_unlock(&spare.lock);
}

const void *kiln__gemm_lowp_spare(size_t *size) {
    pthread_mutex_lock(&spare.lock);
    const void *p = spare.ptr;
    *size = spare.size;
    pthread_mutex_unlock(&spare.lock);
    return p;
}

void kiln__lowp_packed_give(void *p) {
    pthread_mutex_lock(&spare.lock);
    if (p == spare.ptr) spare.busy = false;
    else free(p);
    pthread_mutex_unlock(&spare.lock);
}
