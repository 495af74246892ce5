/* A custom module, a pre-norm residual block x + scale * ff(norm(x)), stacked twice under a
 * linear head and trained a few steps; then saved to a safetensors
 * checkpoint, loaded into a freshly initialised model, and checked to give the
 * same output, bit for bit. residual_checkpoint.py beside it is the same program in PyTorch.
 * Usage: residual_checkpoint [STEPS [PATH]] */
#include <kiln.h>
#include <stdio.h>

enum { D = 16 };

static kiln_tensor residual(kiln_module *m, kiln_tensor x, void *ctx) {
    (void)ctx;
    kiln_tensor h = kiln_module_forward(kiln_module_child(m, "norm"), kiln_ref(x));
    h = kiln_module_forward(kiln_module_child(m, "ff"), h);
    return kiln_add(x, kiln_mul(h, kiln_module_param(m, "scale")));
}

static kiln_module *residual_new(uint64_t seed) {
    kiln_module *m = kiln_module_new("Residual", residual, NULL, NULL);
    kiln_module *ff[] = {kiln_linear_new(D, 4 * D, true, seed), kiln_gelu_new(), kiln_linear_new(4 * D, D, true, seed + 1)};
    kiln_module_add_child(m, "norm", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(m, "ff", kiln_sequential_new(3, ff));
    kiln_module_add_parameter(m, "scale", kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(D), 0.5));
    return m;
}

static kiln_module *model_new(uint64_t seed) {
    kiln_module *layers[] = {residual_new(seed), residual_new(seed + 2), kiln_linear_new(D, 1, true, seed + 4)};
    return kiln_sequential_new(3, layers);
}

int main(int argc, char **argv) {
    long steps = 50;
    const char *path = argc > 2 ? argv[2] : "residual_checkpoint.safetensors";
    if ((argc > 1 && sscanf(argv[1], "%ld", &steps) != 1) || steps < 1) return fprintf(stderr, "usage: %s [STEPS [PATH]]\n", argv[0]), 2;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(128, D), 0);
    kiln_tensor y = kiln_mean_dims(kiln_tanh(kiln_ref(x)), KILN_DIMS(1), true);
    kiln_module *model = model_new(1), *loaded = model_new(100);
    kiln_optimizer *opt = kiln_adam_new(model, kiln_adam_defaults());
    double l;
    for (long step = 1; step <= steps; step++)
        if (kiln_train_step(opt, kiln_mse_loss(kiln_module_forward(model, kiln_ref(x)), kiln_ref(y)), &l) != KILN_OK)
            return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    printf("trained %ld steps, loss %.4f\n", steps, l);
    float diff;
    if (kiln_checkpoint_save(path, model, NULL) != KILN_OK || kiln_checkpoint_load(path, loaded, NULL) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    kiln_tensor out = kiln_module_forward(model, kiln_ref(x));
    if (kiln_into_scalar(kiln_max(kiln_abs(kiln_sub(out, kiln_module_forward(loaded, x)))), &diff) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    printf("saved to %s and loaded: largest output difference %g\n", path, diff);
    kiln_release(y);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    kiln_module_free(loaded);
    return diff != 0;
}
