/* Linear, Flatten and the activation modules. */

#include <stdio.h>
#include <stdlib.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"

/* ---- Linear -------------------------------------------------------------------------------- */

static kiln_tensor linear_forward(kiln_module *m, kiln_tensor x) {
    const kiln__linear_state *s = m->state;
    if (!kiln__nn_expect_input(&x, 1, &s->in_features, true, "Linear", "Linear(%lld -> %lld)",
                               (long long)s->in_features, (long long)s->out_features))
        return x;
    return kiln_linear(x, kiln_ref(m->params[0].tensor), s->bias ? kiln_ref(m->params[1].tensor) : KILN_NONE);
}

const kiln__module_vtable kiln__linear_vt = {"Linear", linear_forward, NULL};

kiln_module *kiln_linear_new(int64_t in_features, int64_t out_features, bool bias, uint64_t seed) {
    if (in_features < 0 || out_features < 0)
        return kiln__nn_bad_arg("kiln_linear_new", "in_features %lld and out_features %lld must not be negative",
                                (long long)in_features, (long long)out_features);
    kiln_module *m = kiln__module_new(&kiln__linear_vt, sizeof(kiln__linear_state));
    if (m) *(kiln__linear_state *)m->state = (kiln__linear_state){in_features, out_features, bias};
    /* PyTorch's default: kaiming_uniform(a = sqrt(5)) for the weight, which is
     * U(-1/sqrt(in), 1/sqrt(in)), and the same bound for the bias */
    kiln__nn_param ps[2] = {
        {"weight", kiln__nn_uniform_fan_in(KILN_SHAPE(out_features, in_features), in_features, kiln__nn_seed(seed, 0)),
         false},
        {"bias",
         bias ? kiln__nn_uniform_fan_in(KILN_SHAPE(out_features), in_features, kiln__nn_seed(seed, 1)) : KILN_NONE,
         false},
    };
    return kiln__nn_finish(m, bias ? 2 : 1, ps);
}

/* ---- Flatten ------------------------------------------------------------------------------- */

typedef struct {
    int start_dim, end_dim;
} flatten_state;

static kiln_tensor flatten_forward(kiln_module *m, kiln_tensor x) {
    const flatten_state *s = m->state;
    return kiln_flatten(x, s->start_dim, s->end_dim);
}

static const kiln__module_vtable flatten_vt = {"Flatten", flatten_forward, NULL};

kiln_module *kiln_flatten_new(int start_dim, int end_dim) {
    if (start_dim < -KILN_MAX_DIMS || start_dim >= KILN_MAX_DIMS || end_dim < -KILN_MAX_DIMS ||
        end_dim >= KILN_MAX_DIMS)
        return kiln__nn_bad_arg("kiln_flatten_new", "dims %d and %d must lie in [-%d, %d)", start_dim, end_dim,
                                KILN_MAX_DIMS, KILN_MAX_DIMS);
    kiln_module *m = kiln__module_new(&flatten_vt, sizeof(flatten_state));
    if (m) *(flatten_state *)m->state = (flatten_state){start_dim, end_dim};
    return m;
}

/* ---- activations --------------------------------------------------------------------------- */

#define KILN__ACTIVATION(name, type)                                                                                   \
    static kiln_tensor name##_forward(kiln_module *m, kiln_tensor x) { return kiln_##name(x); }                        \
    static const kiln__module_vtable name##_vt = {type, name##_forward, NULL};                                         \
    kiln_module *kiln_##name##_new(void) { return kiln__module_new(&name##_vt, 0); }

KILN__ACTIVATION(relu, "ReLU")
KILN__ACTIVATION(gelu, "GELU")
KILN__ACTIVATION(tanh, "Tanh")
KILN__ACTIVATION(sigmoid, "Sigmoid")
KILN__ACTIVATION(silu, "SiLU")

/* kiln_quantize_dynamic's swap, shared by the int8 and the q8_0/q4_0 layers (linear_int8.c,
 * linear_blockq.c): the Linear's parameters give way to the quantized buffers. */
kiln_status kiln__linear_take_quantized(kiln_module *m, const kiln__module_vtable *vt, const char *weight_name,
                                        const char *scale_name, kiln_tensor packed, kiln_tensor scales) {
    const kiln__linear_state *s = m->state;
    /* the new tensors replace the parameters only now that nothing can fail */
    kiln__module_param *ps = calloc(3, sizeof *ps);
    if (!ps) {
        kiln_release(packed), kiln_release(scales);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_quantize_dynamic", "cannot quantize a Linear");
    }
    ps[0] = (kiln__module_param){"", packed, true};
    ps[1] = (kiln__module_param){"", scales, true};
    snprintf(ps[0].name, sizeof ps[0].name, "%s", weight_name);
    snprintf(ps[1].name, sizeof ps[1].name, "%s", scale_name);
    if (s->bias) ps[2] = (kiln__module_param){"bias", kiln_detach(m->params[1].tensor), true};
    kiln_release(m->params[0].tensor);
    free(m->params);
    m->params = ps;
    m->n_params = s->bias ? 3 : 2;
    m->vt = vt;
    return KILN_OK;
}
