/* A matrix product as the producer of a fusion group (see ir/expr.h): a 2-d MATMUL on the CPU
 * (linear's, with or without its bias) starts a group, and the elementwise ops over its shape
 * that follow join through kiln__window_try_join as its epilogue; the CPU kernel runs the GEMM
 * a block of rows at a time and the epilogue over each block while it is in cache
 * (backend/cpu/fused_matmul.c). Batched products, and outputs seen through another view (a
 * reshape back to [..., out]), are left to run unfused.
 *
 * So are products smaller than one panel (kiln__cpu_panel_bytes, half an L2): their output
 * stays in L2 between the GEMM and a separate pass, so the epilogue saves a pass over cache
 * only (the ReLU after a 128 x 256 x 256 product: 1.3 of 83 us), while as groups the small
 * training products ran slower: the Fashion-MNIST MLP epoch (outputs of 128 x 256 and
 * 128 x 128) took 3-10% longer fused than with KILN_FUSION=0 on a quiet 2-core machine and
 * matched it with these groups left out; alternated under load, 1.03-1.05x unfused with them
 * and 0.96-0.99x without (BENCHMARKS.md). KILN_FUSION_MATMUL_MIN_BYTES=N sets another
 * threshold (0: every product). */
#include "backend/backend-impl.h"
#include "engine/fusion-impl.h"

static _Atomic int64_t min_bytes_set = -1; /* -1: the environment's, else the panel size */

void kiln__fusion_set_matmul_min_bytes(int64_t bytes) { atomic_store(&min_bytes_set, bytes < 0 ? -1 : bytes); }

static int64_t min_bytes(void) {
    int64_t v = atomic_load_explicit(&min_bytes_set, memory_order_relaxed);
    if (v >= 0) return v;
    static _Atomic int64_t from_env = -2; /* -2: not read yet; -1: unset */
    int64_t e = atomic_load_explicit(&from_env, memory_order_relaxed);
    if (e == -2) {
        e = kiln__env_int("KILN_FUSION_MATMUL_MIN_BYTES", 0, -1);
        atomic_store_explicit(&from_env, e, memory_order_relaxed);
    }
    return e >= 0 ? e : kiln__cpu_panel_bytes();
}

/* Matrix dims (rows, cols, strides) that reach GEMM without a copy: row- or column-contiguous
 * (the CPU kernel's rule); the kernel then cannot run out of memory once it has started. */
static bool gemm_ready(const kiln__view *v) {
    int64_t rows = v->shape[0], cols = v->shape[1], rs = v->strides[0], cs = v->strides[1];
    if (cols == 1) cs = 1;
    if (rows == 1) rs = cs == 1 ? (cols > 1 ? cols : 1) : 1;
    return (cs == 1 && rs >= (cols > 1 ? cols : 1)) || (rs == 1 && cs >= (rows > 1 ? rows : 1));
}

bool kiln__fusion_matmul_fusable(const kiln__op *op) {
    if (op->code != KILN__OP_MATMUL || op->flags || op->n_out != 1 || op->n_in < 2 || op->n_in > 3) return false;
    const kiln__view *out = &op->out[0];
    if (!out->storage || out->storage->device != KILN_CPU || out->ndim != 2 || !kiln__view_is_contiguous(out) ||
        kiln__view_numel(out) == 0 || (out->dtype != KILN_F32 && out->dtype != KILN_F64))
        return false;
    for (int i = 0; i < op->n_in; i++) {
        const kiln__view *v = &op->in[i];
        if (!v->storage || v->storage->device != KILN_CPU || v->dtype != out->dtype || v->ndim != 2 ||
            v->storage == out->storage)
            return false;
    }
    if (!gemm_ready(&op->in[0]) || !gemm_ready(&op->in[1])) return false;
    return kiln__view_numel(out) * (int64_t)kiln__elsize(out->dtype) >= min_bytes();
}

static int find_storage(const kiln__window *w, const kiln__storage *s) {
    for (int i = 0; i < w->n_st; i++)
        if (w->st[i].s == s) return i;
    return -1;
}

/* Starts w's (empty) group with op (w->lock held). The product's operands are marked as read
 * through a mapping no elementwise view matches (`same` false), so no op of the group may
 * write them: every block's GEMM reads all of the right operand and the bias's rows, before
 * or after earlier blocks' epilogues ran. Its output keeps its memory even when no handle
 * remains (read_first: the GEMM writes it, the epilogue reads it there). */
bool kiln__window_try_join_matmul(kiln__window *w, const kiln__op *op) {
    kiln__fused *g = w->g;
    if (g->n_ops != 0 || w->n_st != 0 || op->n_in + 1 > MAX_STORAGES) return false;
    for (int i = 0; i < op->n_in; i++)
        if (!kiln__var_of(op->in[i].storage)) return false;
    if (!kiln__var_of(op->out[0].storage) || !kiln__fused_add_matmul(g, op)) return false;
    for (int i = 0; i < op->n_in; i++) {
        if (find_storage(w, op->in[i].storage) >= 0) continue;
        w->st[w->n_st] = (window_storage){.s = op->in[i].storage, .map = op->in[i], .read_first = true};
        atomic_store((kiln__window *_Atomic *)&op->in[i].storage->window, w);
        w->n_st++;
    }
    w->st[w->n_st++] = (window_storage){.s = op->out[0].storage, .map = op->out[0], .same = true, .written = true,
                                        .read_first = true};
    atomic_store((kiln__window *_Atomic *)&op->out[0].storage->window, w);
    w->bytes += (int64_t)op->out[0].storage->nbytes;
    kiln__window_count_held(w);
    return true;
}
