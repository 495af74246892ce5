/* Which ops may join a stream's fusion group (see engine/fusion.h): elementwise ops of one
 * shape whose accesses keep tile-wise evaluation in program order right, a reduction over
 * the last dim of what the group wrote (CPU groups only), and after it elementwise ops per row
 * or broadcast along the rows (the epilogue). */
#include "backend/backend-impl.h"
#include "engine/fusion-impl.h"

static bool same_shape(const kiln__view *v, int ndim, const int64_t *shape) {
    if (v->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (v->shape[d] != shape[d]) return false;
    return true;
}

static bool all_zero_strides(const kiln__view *v) {
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] != 1 && v->strides[d] != 0) return false;
    return true;
}

/* A device whose backend runs a fused group (FUSED): the CPU, or a device backend with a
 * generated kernel for it (OpenCL). */
static bool device_fuses(kiln_device dev) {
    if (dev == KILN_CPU) return true;
    const kiln__backend *be = kiln__backend_get(dev);
    return be && be->kernels[KILN__OP_FUSED];
}

/* A group is on one device (its ops passed kiln__fusion_op_fusable, so one that fuses). */
static kiln_device group_device(const kiln__fused *g) { return g->ops[0].out[0].storage->device; }

/* An elementwise op with one dense output whose inputs are already broadcast to its shape
 * (what the IR and the tile interpreter handle), every storage on one device that fuses. */
bool kiln__fusion_op_fusable(const kiln__op *op) {
    if (op->flags || op->n_out != 1 || !kiln__expr_opcode_fusable(op->code)) return false;
    const kiln__view *out = &op->out[0];
    if (!out->storage || !kiln__view_is_contiguous(out) || kiln__view_numel(out) == 0) return false;
    kiln_device dev = out->storage->device;
    for (int i = 0; i < op->n_in; i++) {
        const kiln__view *v = &op->in[i];
        if (!same_shape(v, out->ndim, out->shape) || (v->storage && v->storage->device != dev)) return false;
    }
    if (!device_fuses(dev)) return false;
    /* integer fmod/remainder fail on a zero divisor while running: a group could then have
     * overwritten an in-place input before its ops are rerun one by one */
    if ((op->code == KILN__OP_FMOD || op->code == KILN__OP_REMAINDER) && !kiln__dtype_is_float(out->dtype))
        return false;
    /* pow's x * x shortcut depends on a stride-0 exponent: keep what the unfused kernel sees */
    if (op->code == KILN__OP_POW && op->in[1].storage && !all_zero_strides(&op->in[1]) &&
        !kiln__view_is_contiguous(&op->in[1]))
        return false;
    return true;
}

typedef struct {
    kiln__storage *s;
    const kiln__view *v;
    bool write;
} access;

static int accesses_of(const kiln__op *op, access *a) {
    int n = 0;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].storage) a[n++] = (access){op->in[i].storage, &op->in[i], false};
    a[n++] = (access){op->out[0].storage, &op->out[0], true};
    return n;
}

static int find_storage(const kiln__window *w, const kiln__storage *s) {
    for (int i = 0; i < w->n_st; i++)
        if (w->st[i].s == s) return i;
    return -1;
}

/* Tile-wise evaluation in program order is only right when every access to a storage the
 * group writes uses one element mapping (in-place chains: same view each step); after a
 * reduction, a read may also broadcast a reduced-shape value along the rows it belongs to
 * (blocks hold whole rows, so the row's value is there). same_map[j]: whether access j uses
 * its storage's mapping (the first access's), for accesses_commit. */
static bool accesses_fit(const kiln__window *w, const access *a, int n, bool *same_map) {
    int n_new = 0;
    for (int j = 0; j < n; j++) {
        const kiln__view *map = NULL;
        bool same = true, written = false, seen_here = false;
        int e = find_storage(w, a[j].s);
        if (e >= 0) map = &w->st[e].map, same = w->st[e].same, written = w->st[e].written;
        for (int k = 0; k < j; k++) {
            if (a[k].s != a[j].s) continue;
            seen_here = true;
            if (!map) map = a[k].v;
            same &= same_map[k]; /* (true for the access that gave the map) */
            written |= a[k].write;
        }
        bool this_same = same_map[j] = !map || kiln__view_same(map, a[j].v);
        if (a[j].write && !(same && this_same)) return false;
        if (written && !this_same && !(w->closed && !a[j].write && kiln__view_is_row_broadcast(a[j].v, map)))
            return false;
        if (e < 0 && !seen_here) n_new++;
    }
    return w->n_st + n_new <= MAX_STORAGES;
}

static void accesses_commit(kiln__window *w, const access *a, int n, const bool *same_map) {
    for (int j = 0; j < n; j++) {
        int e = find_storage(w, a[j].s);
        if (e < 0) {
            e = w->n_st++;
            w->st[e] = (window_storage){.s = a[j].s, .map = *a[j].v, .same = true};
            atomic_store((kiln__window *_Atomic *)&a[j].s->window, w);
        }
        w->st[e].same &= same_map[j];
        if (a[j].write && !w->st[e].written) w->bytes += (int64_t)a[j].s->nbytes;
        if (!a[j].write && !w->st[e].written) w->st[e].read_first = true;
        w->st[e].written |= a[j].write;
    }
}

/* After the reduction that closed w's group: an elementwise op of the group's shape, or of the
 * reduced shape (last dim 1) whose inputs are values the group wrote, scalars, or inputs of
 * the reduced shape that are dense or one value (what the CPU kernel reads per row). */
static bool epilogue_fits(const kiln__window *w, const kiln__op *op) {
    const kiln__fused *g = w->g;
    int nd = g->ndim;
    if (g->row <= 0) return false;
    if (same_shape(&op->out[0], nd, g->shape)) return true;
    const kiln__view *out = &op->out[0];
    if (out->ndim != nd || out->shape[nd - 1] != 1) return false;
    for (int d = 0; d < nd - 1; d++)
        if (out->shape[d] != g->shape[d]) return false;
    for (int i = 0; i < op->n_in; i++) {
        const kiln__view *v = &op->in[i];
        int e = v->storage ? find_storage(w, v->storage) : -1;
        /* a value the group wrote, or an input of the reduced shape, dense or one value */
        if (v->storage && (e < 0 || !w->st[e].written) && !kiln__view_is_contiguous(v) && !all_zero_strides(v))
            return false;
    }
    return true;
}

/* Adds op to w's group (w->lock held); false when it does not fit the current group. */
bool kiln__window_try_join(kiln__window *w, const kiln__op *op) {
    access a[KILN__OP_MAX_IN + 1];
    int n = accesses_of(op, a);
    for (int i = 0; i < n; i++)
        if (!kiln__var_of(a[i].s)) return false; /* (a storage with a var reaches the release hook) */
    kiln__fused *g = w->g;
    if (w->closed ? !epilogue_fits(w, op) : g->n_ops > 0 && !same_shape(&op->out[0], g->ndim, g->shape)) return false;
    if (g->n_ops > 0 && group_device(g) != op->out[0].storage->device) return false;
    bool same_map[KILN__OP_MAX_IN + 1];
    if (!accesses_fit(w, a, n, same_map)) return false;
    if (g->n_ops == 0) kiln__fused_init(g, &op->out[0]);
    if (!kiln__fused_add(g, op)) return false;
    accesses_commit(w, a, n, same_map);
    kiln__window_count_held(w);
    return true;
}

/* ---- a reduction ending a group ------------------------------------------------------------ */
/* Rows the CPU interpreter takes whole into a tile: longer ones are reduced unfused. */
#define MAX_FUSED_ROW 16384

/* The reductions whose fuse column (ir/reduce_table.h) says LAST. */
bool kiln__fusion_is_reduction(kiln__opcode code) { return kiln__reduce_info_of(code)->fuse == KILN__RFUSE_LAST; }

/* A reduction over the last dim of a value the group wrote (same mapping), into a fresh dense
 * output: it ends the group (w->lock held; true when it joined). */
bool kiln__window_try_join_reduce(kiln__window *w, const kiln__op *op) {
    kiln__fused *g = w->g;
    if (w->closed || !g || g->n_ops == 0 || g->matmul || op->flags || op->n_in != 1 || op->n_out != 1 ||
        !kiln__fusion_is_reduction(op->code))
        return false;
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    int nd = g->ndim;
    if (nd < 1 || g->shape[nd - 1] < 2 || g->shape[nd - 1] > MAX_FUSED_ROW || !in->storage || !out->storage ||
        out->storage->device != group_device(g) ||
        !same_shape(in, nd, g->shape) || out->ndim != nd || !kiln__view_is_contiguous(out) ||
        (in->dtype != KILN_F32 && in->dtype != KILN_F64))
        return false;
    for (int d = 0; d < nd; d++)
        if (out->shape[d] != (d == nd - 1 ? 1 : g->shape[d])) return false;
    int e = find_storage(w, in->storage);
    if (e < 0 || !w->st[e].written || find_storage(w, out->storage) >= 0) return false;
    access a[2] = {{in->storage, in, false}, {out->storage, out, true}};
    bool same_map[2];
    if (!accesses_fit(w, a, 2, same_map) || !kiln__var_of(out->storage) || !kiln__fused_add_reduce(g, op)) return false;
    accesses_commit(w, a, 2, same_map);
    w->closed = true;
    kiln__window_count_held(w);
    return true;
}
