/* An MLP classifying points of the plane by the ring they lie in, fed by kiln's loader over an
 * in-memory dataset (shuffled batches) and trained with Adam; then saved to a checkpoint,
 * loaded into a fresh model, and checked to give the same loss.
 * bench/peers/example_mlp_checkpoint.py is the same program in PyTorch.
 * Usage: mlp_checkpoint [--steps N] */
#include <getopt.h>
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 1024, H = 64 };

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(2, H, true, seed), kiln_relu_new(), kiln_linear_new(H, H, true, seed + 1),
                             kiln_relu_new(), kiln_linear_new(H, 3, true, seed + 2)};
    return kiln_sequential_new(5, layers);
}

int main(int argc, char **argv) {
    const char *usage = "usage: mlp_checkpoint [--steps N] (N from 1 to 1000000, default 300)\n";
    const struct option opts[] = {{"steps", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
    long steps = 300;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end = "";
        if (c == 'h') return fputs(usage, stdout), 0;
        if (c == 's') steps = strtol(optarg, &end, 10);
        if (c != 's' || end == optarg || *end || steps < 1 || steps > 1000000) return fputs(usage, stderr), 2;
    }
    if (optind < argc) return fputs(usage, stderr), 2;
    kiln_tensor x = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(N, 2), -2, 2, 1);
    kiln_tensor r2 = kiln_sum_dims(kiln_mul(kiln_ref(x), kiln_ref(x)), KILN_DIMS(1), false);
    kiln_tensor y = kiln_cast(kiln_minimum_scalar(kiln_mul_scalar(r2, 0.75), 2), KILN_I64);
    kiln_dataset *data = kiln_memory_dataset_new(kiln_ref(x), kiln_ref(y));
    kiln_loader *loader = kiln_loader_new(data, kiln_loader_defaults(64));
    kiln_module *model = mlp(1);
    kiln_adam_options ao = kiln_adam_defaults();
    ao.lr = 1e-2;
    kiln_optimizer *opt = kiln_adam_new(model, ao);
    kiln_cross_entropy_options ce = kiln_cross_entropy_defaults();
    kiln_tensor xb, yb;
    kiln_status st;
    for (long step = 0, epoch = 0; step < steps; epoch++) {
        kiln_loader_start_epoch(loader, epoch);
        while (step < steps && (st = kiln_loader_next(loader, &xb, &yb)) != KILN_DONE) {
            double l;
            if (st != KILN_OK || kiln_train_step(opt, kiln_cross_entropy(kiln_module_forward(model, xb), yb, ce), &l))
                return fprintf(stderr, "%s\n", kiln_last_error()), 1;
            if (++step == 1 || step % 25 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
        }
    }
    kiln_module *loaded = mlp(11);
    if (kiln_checkpoint_save("mlp_checkpoint.safetensors", model, NULL) != KILN_OK ||
        kiln_checkpoint_load("mlp_checkpoint.safetensors", loaded, NULL) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    double before, after;
    kiln_no_grad_begin();
    kiln_tensor l0 = kiln_cross_entropy(kiln_module_forward(model, kiln_ref(x)), kiln_ref(y), ce);
    kiln_tensor l1 = kiln_cross_entropy(kiln_module_forward(loaded, x), y, ce);
    if (kiln_into_scalar_f64(l0, &before) != KILN_OK || kiln_into_scalar_f64(l1, &after) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    kiln_no_grad_end();
    printf("loss on all points: trained %.6f, loaded from the checkpoint %.6f\n", before, after);
    if (before != after) return fprintf(stderr, "the loaded model differs\n"), 1;
    kiln_loader_free(loader);
    kiln_dataset_free(data);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    kiln_module_free(loaded);
    return 0;
}
