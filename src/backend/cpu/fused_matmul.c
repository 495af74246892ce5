/* The CPU kernel of a fused group that starts with a matrix product (ir/expr.h): the GEMM runs
 * a panel of output rows at a time (the BLAS's sgemm/dgemm per panel, through the MATMUL
 * kernel, bias included as its starting value), and right after each panel the group's
 * elementwise epilogue runs over the blocks that panel completed, while the panel is still in
 * L2. The pre-activation product is read back from cache, never from memory; when no handle to
 * it remains it is not stored apart (an in-place activation overwrites it in the same pass).
 *
 * Each panel's GEMM computes every output element as the whole GEMM would (the BLAS splits M
 * into its own blocks the same way and sums over K in one order per element), so results are
 * the bits of the unfused product followed by the unfused ops (tests/test_fusion_matmul.c). */
#include "backend/cpu/fused-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_small.h"
#include "core/machine.h"

/* Output bytes per panel: half of one core's L2 (core/machine.h; the epilogue reads the panel
 * back while the next ops' inputs and outputs also pass through). Panels
 * hold at least MIN_PANEL_ROWS rows: each panel's GEMM reads all of the right operand, so thin
 * panels would stream a large weight matrix from memory again and again; and a panel of a
 * larger product must not fall to the small-M kernel, whose sums differ from the BLAS's. */
#define MIN_PANEL_ROWS ((int64_t)KILN__GEMM_SMALL_MAX_M + 1)

int64_t kiln__cpu_panel_bytes(void) { return kiln__machine_facts()->l2_bytes / 2; }

/* The number of panels: as many as the target size asks for, rows shared out evenly so that
 * no panel (the last included) holds fewer than MIN_PANEL_ROWS rows. */
static int64_t panel_count(int64_t m, int64_t n, size_t es) {
    int64_t rows = kiln__cpu_panel_bytes() / (n * (int64_t)es);
    if (rows < MIN_PANEL_ROWS) rows = MIN_PANEL_ROWS;
    int64_t panels = m / rows;
    return panels > 1 ? panels : 1;
}

/* The end of the panel that starts at row r0 (panel i of `panels`): the rows shared out evenly;
 * or, when the f32 product goes to oneDNN in tiles of `tile` rows (gemm_dnnl.h), panels of
 * whole tiles, so that each panel makes the same oneDNN calls as the whole product, the last
 * panel taking a remainder too small to be a panel of its own. */
static int64_t panel_end(int64_t m, int64_t panels, int64_t i, int64_t r0, int64_t tile, int64_t rows) {
    if (tile <= 0) return m / panels * (i + 1) + (i + 1 < panels ? 0 : m % panels);
    int64_t r1 = r0 + (rows + tile - 1) / tile * tile;
    return r1 >= m || m - r1 < MIN_PANEL_ROWS ? m : r1;
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
    size_t es = kiln__elsize(mm->out[0].dtype);
    int64_t panels = panel_count(m, n, es), tile = mm->out[0].dtype == KILN_F32 ? kiln__gemm_f32_tile_rows(n, mm->in[0].shape[1]) : 0;
    int64_t n_blocks = (p->numel + p->block - 1) / p->block, grain = KILN__GRAIN_ELEMENTWISE / p->block;
    blocks_from b = {.p = p, .first = 0};
    for (int64_t i = 0, r0 = 0; r0 < m; i++) {
        int64_t r1 = panel_end(m, panels, i, r0, tile, (m + panels - 1) / panels);
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
