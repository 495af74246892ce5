/* The CPU kernel of a fused group that starts with a matrix product (ir/expr.h): the GEMM runs
 * a panel of output rows at a time (the BLAS's sgemm/dgemm per panel, through the MATMUL
 * kernel, bias included as its starting value), and right after each panel the group's
 * elementwise epilogue runs over the blocks that panel completed, while the panel is still in
 * L2. The pre-activation product is read back from cache, never from memory; when no handle to
 * it remains it is not stored apart (an in-place activation overwrites it in the same pass).
 *
 * Each panel's GEMM computes every output element as the whole GEMM would (the BLAS splits M
 * into its own blocks the same way and sums over K in one order per element), so results are
 * the bits of the unfused product followed by the unfused ops (tests/test_fusion_matmul.c).
 * oneDNN's sgemm, which runs f32 products where the build has it, does not keep that promise:
 * such a product is one panel (the epilogue then reads it back from memory when it is larger
 * than L2). */
#include <unistd.h>

#include "backend/cpu/fused-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_small.h"

/* Output bytes per panel: half of one core's L2 (the epilogue reads the panel back while the
 * next ops' inputs and outputs also pass through), 512 KiB where the size is unknown. Panels
 * hold at least MIN_PANEL_ROWS rows: each panel's GEMM reads all of the right operand, so thin
 * panels would stream a large weight matrix from memory again and again; and a panel of a
 * larger product must not fall to the small-M kernel, whose sums differ from the BLAS's. */
#define MIN_PANEL_ROWS ((int64_t)KILN__GEMM_SMALL_MAX_M + 1)

static int64_t l2_bytes(void) {
    static _Atomic int64_t cached; /* 0: not asked yet */
    int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v) return v;
    long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE /* (a glibc extension) */
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    v = l2 > 0 ? (int64_t)l2 : (int64_t)1 << 20;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}

/* The number of panels: as many as the target size asks for, rows shared out evenly so that
 * no panel (the last included) holds fewer than MIN_PANEL_ROWS rows. */
static int64_t panel_count(int64_t m, int64_t n, size_t es) {
    /* oneDNN's sgemm (gemm_dnnl.c) sums an element differently as the rows of its call change
     * (its blocking of k follows m): an f32 product it runs stays one call, as unfused */
    if (es == sizeof(float) && kiln__gemm_dnnl_mode()) return 1;
    int64_t rows = l2_bytes() / 2 / (n * (int64_t)es);
    if (rows < MIN_PANEL_ROWS) rows = MIN_PANEL_ROWS;
    int64_t panels = m / rows;
    return panels > 1 ? panels : 1;
}

/* Rows [r0, r0 + rows) of a 2-d view (a broadcast bias has row stride 0: unchanged). */
static void slice_rows(kiln__view *v, int64_t r0, int64_t rows) {
    v->offset += r0 * v->strides[0];
    v->shape[0] = rows;
}

typedef struct {
    kiln__fused_plan *p;
    int64_t first; /* block index of the range's begin */
} blocks_from;

static void run_panel_blocks(void *ctx, int64_t begin, int64_t end) {
    const blocks_from *b = ctx;
    kiln__fused_run_blocks(b->p, b->first + begin, b->first + end);
}

kiln_status kiln__fused_matmul_run(kiln__fused_plan *p) {
    const kiln__fused *g = p->g;
    const kiln__op *mm = &g->ops[0];
    kiln__kernel_fn gemm = p->kernels[KILN__OP_MATMUL];
    if (!g->matmul || g->ndim != 2 || !gemm) return KILN_ERR_UNSUPPORTED;
    int64_t m = g->shape[0], n = g->shape[1];
    int64_t panels = panel_count(m, n, kiln__elsize(mm->out[0].dtype));
    int64_t n_blocks = (p->numel + p->block - 1) / p->block, grain = KILN__GRAIN_ELEMENTWISE / p->block;
    blocks_from b = {.p = p, .first = 0};
    for (int64_t i = 0, r0 = 0; i < panels; i++) {
        int64_t r1 = m / panels * (i + 1) + (i + 1 < panels ? 0 : m % panels);
        kiln__op panel = *mm;
        slice_rows(&panel.in[0], r0, r1 - r0);
        if (panel.n_in > 2) slice_rows(&panel.in[2], r0, r1 - r0);
        slice_rows(&panel.out[0], r0, r1 - r0);
        /* fusion_matmul.c took only operands GEMM reads in place, so this fails before the
         * first panel's epilogue or not at all: the engine can still rerun the ops one by one */
        kiln_status st = gemm(&panel);
        if (st != KILN_OK) return st;
        /* the blocks that end inside rows [0, r1); one straddling r1 waits for the next panel */
        int64_t done = r1 == m ? n_blocks : r1 * n / p->block;
        if (done > b.first) kiln__parallel_for(done - b.first, grain > 0 ? grain : 1, run_panel_blocks, &b);
        b.first = done > b.first ? done : b.first;
        st = atomic_load(&p->status);
        if (st != KILN_OK) return st;
        r0 = r1;
    }
    return KILN_OK;
}
