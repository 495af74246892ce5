/* An MLP fitting y = sin(x0) + sin(x1) + sin(x2) on fresh random points each step, trained with
 * AdamW and two parameter groups as PyTorch users write them: weight decay on the weight
 * matrices, none on biases and the layer norm. mlp_adamw.py beside it is the same program in
 * PyTorch.  Usage: mlp_adamw [STEPS] */
#include <kiln.h>
#include <stdio.h>
#include <string.h>

static bool no_decay(const char *name, void *ctx) { return (void)ctx, strstr(name, "bias") || !strncmp(name, "1.", 2); }

int main(int argc, char **argv) {
    long steps = 200;
    if ((argc > 1 && sscanf(argv[1], "%ld", &steps) != 1) || steps < 1) return fprintf(stderr, "usage: %s [STEPS]\n", argv[0]), 2;
    kiln_module *layers[] = {kiln_linear_new(3, 64, true, 1), kiln_layer_norm_new(64, 1e-5, true), kiln_relu_new(),
                             kiln_linear_new(64, 1, true, 2)};
    kiln_module *model = kiln_sequential_new(4, layers);
    kiln_tensor handles[16]; /* the model's own handles, which the groups point into */
    kiln_param_group groups[2];
    kiln_module_param_groups(model, no_decay, NULL, handles, 16, groups);
    groups[0].weight_decay = 0;
    kiln_optimizer *opt = kiln_adam_new_groups(2, groups, (kiln_adam_options){.lr = 1e-2, .weight_decay = 0.01, .decoupled_weight_decay = true});
    for (long step = 1; step <= steps; step++) {
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 3), (uint64_t)step);
        kiln_tensor y = kiln_sum_dims(kiln_sin(kiln_ref(x)), KILN_DIMS(1), true);
        double l; /* the one status check: a failure anywhere above poisons the loss */
        if (kiln_train_step(opt, kiln_mse_loss(kiln_module_forward(model, x), y), &l) != KILN_OK)
            return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 50 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
    }
    printf("%d parameters without weight decay, %d with\n", groups[0].n, groups[1].n);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
}
