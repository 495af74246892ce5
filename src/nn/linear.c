/* Linear, Flatten and the activation modules. */

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
