/* The CPU kernel of a fused elementwise group: interprets the group's expression IR
 * (ir/expr.h) tile by tile, so intermediates live in a small per-thread buffer instead of
 * memory. Each node runs the unfused kernel of its opcode over the whole tile, so results
 * are bit-identical to running the ops one by one. Tiles are split over the thread pool. A
 * group ending in a reduction takes whole rows per tile, and its REDUCE node runs the unfused
 * reduction kernel over those rows (each row's result depends on that row alone). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "ir/expr.h"

/* Elements per tile. Each node costs ~100 ns of kernel setup per tile; measured on chain8
 * (bench_elementwise, 2 threads): 2048 -> 82 ms, 4096 -> 74 ms, 8192 -> 74 ms. */
#define TILE ((int64_t)4096)
#define GRAIN_TILES 8 /* tiles per parallel task: a few ops' worth of a cheap elementwise grain */

enum { LOAD_GATHER, LOAD_DENSE, LOAD_SCALAR };

typedef struct {
    const kiln__fused *g;
    const kiln__kernel_fn *kernels;
    int64_t numel;
    int64_t tile; /* elements per tile: TILE, or whole rows when the group ends in a reduction */
    uint8_t load_mode[KILN__EXPR_MAX_INPUTS];
    int8_t store_of[KILN__EXPR_MAX_NODES]; /* the output a node is stored to, or -1 */
    int8_t slot_of[KILN__EXPR_MAX_NODES]; /* the scratch tile a node's value lives in */
    int n_slots;
    _Atomic kiln_status status;
} fused_run;

static int load_mode_of(const kiln__fused *g, const kiln__view *v) {
    bool zero = true, dense = true;
    int64_t expect = 1;
    for (int d = g->ndim - 1; d >= 0; d--) {
        if (g->shape[d] == 1) continue;
        if (v->strides[d] != 0) zero = false;
        if (v->strides[d] != expect) dense = false;
        expect *= g->shape[d];
    }
    return zero ? LOAD_SCALAR : dense ? LOAD_DENSE : LOAD_GATHER;
}

/* Copies n elements, stride elements apart, from src to dst: a whole run of the innermost
 * dim at once, so a broadcast (stride 0) or dense (stride 1) run costs one fill or memcpy. */
static void copy_run(char *dst, const char *src, int64_t n, int64_t stride, size_t es) {
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * es);
    } else if (stride == 0 && es == 4) {
        uint32_t v;
        memcpy(&v, src, 4);
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, &v, 4);
    } else if (stride == 0 && es == 8) {
        uint64_t v;
        memcpy(&v, src, 8);
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 8, &v, 8);
    } else {
        for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, src + i * stride * (int64_t)es, es);
    }
}

/* Copies elements [t0, t0 + m) of v (in the group's row-major order) into buf, a run of the
 * innermost dim at a time (element by element, the broadcast lse of a composed softmax made
 * the fused pass slower than the unfused ops). */
static void gather(const kiln__fused *g, const kiln__view *v, int64_t t0, int64_t m, char *buf) {
    int64_t idx[KILN_MAX_DIMS], rest = t0, off = v->offset;
    for (int d = g->ndim - 1; d >= 0; d--) {
        idx[d] = rest % g->shape[d];
        rest /= g->shape[d];
        off += idx[d] * v->strides[d];
    }
    size_t es = kiln__elsize(v->dtype);
    const char *base = v->storage->data;
    int last = g->ndim - 1;
    if (last < 0) {
        memcpy(buf, base + off * (int64_t)es, es);
        return;
    }
    for (int64_t i = 0; i < m;) {
        int64_t run = g->shape[last] - idx[last];
        if (run > m - i) run = m - i;
        copy_run(buf + (size_t)i * es, base + off * (int64_t)es, run, v->strides[last], es);
        i += run;
        idx[last] += run;
        off += run * v->strides[last];
        if (idx[last] < g->shape[last]) break; /* the tile ended inside this run */
        off -= idx[last] * v->strides[last];
        idx[last] = 0;
        for (int d = last - 1; d >= 0; d--) {
            off += v->strides[d];
            if (++idx[d] < g->shape[d]) break;
            off -= idx[d] * v->strides[d];
            idx[d] = 0;
        }
    }
}

static kiln__view flat_view(kiln__storage *s, kiln_dtype dtype, int64_t offset, int64_t m, int64_t stride) {
    kiln__view v = {.storage = s, .dtype = dtype, .ndim = 1, .offset = offset};
    v.shape[0] = m;
    v.strides[0] = stride;
    return v;
}

/* Evaluates every node over elements [t0, t0 + m). With store set, a stored node writes
 * straight into its output: every read of the value it overwrites comes earlier in program
 * order (later reads name the node), and all accesses share one element mapping. Without,
 * nothing is written but the scratch buffers. */
static kiln_status run_tile(fused_run *r, int64_t t0, int64_t m, char *scratch, kiln__storage *bufs, bool store) {
    const kiln__fused *g = r->g;
    const kiln__expr *e = &g->expr;
    kiln__view tv[KILN__EXPR_MAX_NODES];
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        bufs[r->slot_of[i]].data = scratch + (size_t)r->slot_of[i] * (size_t)r->tile * 8;
        if (n->kind == KILN__EXPR_CONST) {
            tv[i] = kiln__view_scalar(n->dtype, 1, &m, n->value);
        } else if (n->kind == KILN__EXPR_LOAD) {
            const kiln__view *in = &g->input[n->input];
            switch (r->load_mode[n->input]) {
            case LOAD_DENSE: tv[i] = flat_view(in->storage, in->dtype, in->offset + t0, m, 1); break;
            case LOAD_SCALAR: tv[i] = flat_view(in->storage, in->dtype, in->offset, m, 0); break;
            default:
                gather(g, in, t0, m, bufs[r->slot_of[i]].data);
                tv[i] = flat_view(&bufs[r->slot_of[i]], in->dtype, 0, m, 1);
            }
        } else if (n->kind == KILN__EXPR_REDUCE) {
            int64_t row = g->row, rows = m / row;
            const kiln__view *a = &tv[n->arg[0]];
            kiln__op op = {.code = n->code, .n_in = 1, .n_out = 1, .name = g->ops[n->op].name};
            op.p.i[0] = (int64_t)n->param[0];
            op.p.i[1] = (int64_t)n->param[1];
            op.in[0] = (kiln__view){.storage = a->storage, .dtype = a->dtype, .ndim = 2, .offset = a->offset,
                                    .shape = {rows, row}, .strides = {row, 1}};
            int w = store ? r->store_of[i] : -1;
            const kiln__view *out = w >= 0 ? &g->output[w] : NULL;
            op.out[0] = (kiln__view){.storage = out ? out->storage : &bufs[r->slot_of[i]], .dtype = n->dtype, .ndim = 2,
                                     .offset = out ? out->offset + t0 / row : 0, .shape = {rows, 1}, .strides = {1, 1}};
            tv[i] = op.out[0];
            kiln__kernel_fn fn = r->kernels[n->code];
            kiln_status st = fn ? fn(&op) : KILN_ERR_UNSUPPORTED;
            if (st != KILN_OK) return st;
        } else {
            const kiln__op *src = &g->ops[n->op];
            kiln__op op = {.code = n->code, .n_in = n->n_args, .n_out = 1, .name = src->name,
                           .file = src->file, .line = src->line, .seq = src->seq};
            for (int a = 0; a < n->n_args; a++) op.in[a] = tv[n->arg[a]];
            for (int k = 0; k < 4; k++) op.p.f[k] = n->param[k];
            int w = store ? r->store_of[i] : -1;
            if (w >= 0) {
                const kiln__view *out = &g->output[w];
                tv[i] = op.out[0] = flat_view(out->storage, out->dtype, out->offset + t0, m, 1);
            } else {
                tv[i] = op.out[0] = flat_view(&bufs[r->slot_of[i]], n->dtype, 0, m, 1);
            }
            kiln__kernel_fn fn = r->kernels[n->code];
            kiln_status st = fn ? fn(&op) : KILN_ERR_UNSUPPORTED;
            if (st != KILN_OK) return st;
        }
    }
    return KILN_OK;
}

/* Gives each node a scratch tile, reusing one whose value no later node reads: a chain of
 * any length cycles through two or three tiles (96 KiB of scratch per thread for chain8
 * instead of 384). It did not change chain8's time measurably. A node never shares a tile
 * with its own arguments, so kernels see distinct buffers. Returns the number of tiles. */
static int plan_slots(const kiln__expr *e, int8_t *slot_of) {
    int16_t last_use[KILN__EXPR_MAX_NODES], free_after[KILN__EXPR_MAX_NODES];
    for (int i = 0; i < e->n_nodes; i++) {
        last_use[i] = (int16_t)i;
        const kiln__expr_node *n = &e->node[i];
        if (n->kind == KILN__EXPR_OP || n->kind == KILN__EXPR_REDUCE)
            for (int a = 0; a < n->n_args; a++)
                if (last_use[n->arg[a]] < i) last_use[n->arg[a]] = (int16_t)i;
    }
    int n_slots = 0;
    for (int i = 0; i < e->n_nodes; i++) {
        int s = 0;
        while (s < n_slots && free_after[s] >= i) s++;
        if (s == n_slots) n_slots++;
        slot_of[i] = (int8_t)s;
        free_after[s] = last_use[i];
    }
    return n_slots;
}

static void run_tiles(void *ctx, int64_t begin, int64_t end) {
    fused_run *r = ctx;
    char *scratch = malloc((size_t)r->n_slots * (size_t)r->tile * 8);
    kiln__storage bufs[KILN__EXPR_MAX_NODES];
    memset(bufs, 0, sizeof(kiln__storage) * (size_t)r->n_slots);
    if (!scratch) {
        atomic_store(&r->status, KILN_ERR_OUT_OF_MEMORY);
        return;
    }
    for (int64_t t = begin; t < end && atomic_load_explicit(&r->status, memory_order_relaxed) == KILN_OK; t++) {
        int64_t t0 = t * r->tile, m = r->numel - t0 < r->tile ? r->numel - t0 : r->tile;
        kiln_status st = run_tile(r, t0, m, scratch, bufs, true);
        if (st != KILN_OK) atomic_store(&r->status, st);
    }
    free(scratch);
}

static kiln_status kernel_fused(const kiln__op *op) {
    const kiln__fused *g = (const kiln__fused *)(intptr_t)op->p.i[0];
    fused_run r = {.g = g, .kernels = kiln__cpu_backend()->kernels, .numel = 1};
    for (int d = 0; d < g->ndim; d++) r.numel *= g->shape[d];
    atomic_init(&r.status, KILN_OK);
    for (int k = 0; k < g->expr.n_inputs; k++) r.load_mode[k] = (uint8_t)load_mode_of(g, &g->input[k]);
    memset(r.store_of, -1, sizeof r.store_of);
    for (int s = 0; s < g->expr.n_stores; s++) r.store_of[g->expr.store[s].node] = (int8_t)g->expr.store[s].output;
    if (r.numel == 0) return KILN_OK;
    r.tile = g->row > 0 ? (TILE > g->row ? TILE / g->row : 1) * g->row : TILE;
    /* one element first, storing nothing: a node whose kernel refuses its dtypes fails here,
     * before any output (possibly an input too, in place) is overwritten */
    r.n_slots = plan_slots(&g->expr, r.slot_of);
    char *scratch = malloc((size_t)r.n_slots * (size_t)r.tile * 8);
    if (!scratch) return KILN_ERR_OUT_OF_MEMORY;
    kiln__storage bufs[KILN__EXPR_MAX_NODES];
    memset(bufs, 0, sizeof bufs);
    kiln_status st = run_tile(&r, 0, g->row > 0 ? g->row : 1, scratch, bufs, false);
    free(scratch);
    if (st != KILN_OK) return st;
    int64_t tiles = (r.numel + r.tile - 1) / r.tile;
    kiln__parallel_for(tiles, GRAIN_TILES, run_tiles, &r);
    return atomic_load(&r.status);
}

void kiln__cpu_register_fused(kiln__kernel_fn *table) { table[KILN__OP_FUSED] = kernel_fused; }
