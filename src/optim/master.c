/* Master weights (the options' master_weights): a bf16 or f16 parameter is updated through an
 * f32 copy kept beside its state, as mixed-precision training keeps it. The step (optimizer.c)
 * casts the gradient up, runs the kind's own f32 update on the master and its f32 state, then
 * rewrites the parameter as the master rounded to its dtype. Why a step that fails leaves
 * everything as it was: the master is made on the host (it can never be a poisoned output),
 * the update keeps its outputs when it fails or is skipped, and the parameter always equals the
 * master rounded, so the rewrite after a failed update writes the values it already holds. */
#include <stdlib.h>

#include "optim/optim-impl.h"

static float widen(kiln_dtype dt, uint16_t v) { return dt == KILN_BF16 ? kiln__bf16_to_f32(v) : kiln__f16_to_f32(v); }
static uint16_t narrow(kiln_dtype dt, float v) { return dt == KILN_BF16 ? kiln__f32_to_bf16(v) : kiln__f32_to_f16(v); }

kiln__tensor *kiln__optim_master_from(kiln__opctx *c, kiln__tensor *param) {
    int64_t n = kiln__tensor_numel(param);
    size_t half_bytes = (size_t)n * sizeof(uint16_t);
    uint16_t *low = malloc(half_bytes ? half_bytes : 1);
    float *wide = malloc((size_t)(n ? n : 1) * sizeof(float));
    kiln__tensor *master = NULL;
    if (!low || !wide) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate an f32 master copy of %lld elements", (long long)n);
    } else if (kiln__t_copy_to_host(c, param, low, half_bytes)) {
        for (int64_t i = 0; i < n; i++) wide[i] = widen(param->dtype, low[i]);
        master = kiln__t_empty(c, param->device, KILN_F32, param->ndim, param->shape);
        if (master && !kiln__t_copy_from_host(c, master, wide, (size_t)n * sizeof(float)))
            kiln__tensor_release(master), master = NULL;
    }
    free(low), free(wide);
    return master;
}

bool kiln__optim_master_write_back(kiln__opctx *c, kiln__tensor *param, const kiln__tensor *master) {
    return kiln__t_copy_into(c, kiln__view_of(param), master); /* the copy rounds to nearest even */
}

/* Why element by element: a DLPack consumer may have written a few elements (a row reset, a
 * manual tweak); those win, while every other element keeps the master's bits below the
 * parameter's precision, exactly as when nobody wrote. The parameter always equals the master
 * rounded after a step, so an element that differs from it was written from outside. */
bool kiln__optim_master_merge_outside_writes(kiln__opctx *c, kiln__tensor *param, kiln__tensor *master) {
    int64_t n = kiln__tensor_numel(param);
    size_t half_bytes = (size_t)n * sizeof(uint16_t), wide_bytes = (size_t)n * sizeof(float);
    uint16_t *low = malloc(half_bytes ? half_bytes : 1);
    float *wide = malloc(wide_bytes ? wide_bytes : 1);
    bool ok = false;
    if (!low || !wide) {
        kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a host copy of %lld elements to compare a master", (long long)n);
    } else if (kiln__t_copy_to_host(c, param, low, half_bytes) && kiln__t_copy_to_host(c, master, wide, wide_bytes)) {
        bool written = false;
        for (int64_t i = 0; i < n; i++)
            if (narrow(param->dtype, wide[i]) != low[i]) wide[i] = widen(param->dtype, low[i]), written = true;
        ok = !written || kiln__t_copy_from_host(c, master, wide, wide_bytes);
    }
    free(low), free(wide);
    return ok;
}
