/* Dropout: the functional op and the module, whose mask changes with every training call. */
#include <math.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"
#include "ops/generator-impl.h"

kiln_tensor kiln_dropout(kiln_tensor x, double p, uint64_t seed) {
    if (!(p >= 0 && p < 1))
        return kiln__nn_fail("kiln_dropout", 1, &x, KILN_ERR_INVALID_ARGUMENT, "p=%g must lie in [0, 1)", p);
    const kiln__tensor *t = kiln__nn_peek(x);
    if (!t || !kiln__dtype_is_float(t->dtype))
        return kiln__nn_fail("kiln_dropout", 1, &x, KILN_ERR_DTYPE, "dropout needs a floating-point tensor, got %s",
                             t ? kiln_dtype_name(t->dtype) : "?");
    if (p == 0) return x;
    kiln_shape shape = {.ndim = t->ndim};
    for (int d = 0; d < t->ndim; d++) shape.dims[d] = t->shape[d];
    /* the mask holds 0 or 1/(1-p), so one multiply both drops and rescales; it is built
     * untracked and saved by the multiply for the backward pass */
    kiln_tensor keep = kiln_bernoulli(t->device, t->dtype, shape, 1.0 - p, seed);
    return kiln_mul(x, kiln_mul_scalar(keep, 1.0 / (1.0 - p)));
}

kiln_tensor kiln_dropout_gen(kiln_tensor x, double p, kiln_generator *g) {
    if (g && !kiln__object_live(g, KILN__GENERATOR_KIND)) return kiln__generator_refused("kiln_dropout_gen", g, x);
    const char *outer = kiln__op_scope_enter("kiln_dropout_gen");
    kiln_tensor y = kiln_dropout(x, p, kiln__generator_draw(g));
    kiln__op_scope_leave(outer);
    return y;
}

typedef struct {
    double p;
    uint64_t seed, calls;
} dropout_state;

uint64_t kiln__nn_call_seed(uint64_t seed, uint64_t *calls) {
    uint64_t v;
    if (!kiln__draw_replay(&v)) v = kiln__nn_seed(seed, (*calls)++);
    kiln__draw_record(v);
    return v;
}

static kiln_tensor dropout_forward(kiln_module *m, kiln_tensor x) {
    dropout_state *s = m->state;
    if (!m->training || s->p == 0) return x;
    return kiln_dropout(x, s->p, kiln__nn_call_seed(s->seed, &s->calls));
}

static const kiln__module_vtable dropout_vt = {"Dropout", dropout_forward, NULL};

kiln_module *kiln_dropout_new(double p, uint64_t seed) {
    if (!(p >= 0 && p < 1)) return kiln__nn_bad_arg("kiln_dropout_new", "p=%g must lie in [0, 1)", p);
    kiln_module *m = kiln__module_new(&dropout_vt, sizeof(dropout_state));
    if (m) *(dropout_state *)m->state = (dropout_state){p, seed, 0};
    return m;
}
