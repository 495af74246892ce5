/* A custom dataset (two interleaved spirals, each sample computed when asked for) fed by kiln's
 * loader (shuffled batches assembled by worker threads) to a small MLP trained with Adam; prints
 * the mean loss of each epoch. custom_dataset.py beside it is the same program in PyTorch.
 * Usage: custom_dataset [EPOCHS] */
#include <kiln.h>
#include <math.h>
#include <stdio.h>

typedef struct { int64_t n; double turns; } spirals; /* the dataset's own state: its ctx */

static int64_t spirals_length(void *ctx) { return ((spirals *)ctx)->n; }

/* Sample i: a point of spiral i % 2 (the second is the first turned by half a circle). */
static kiln_status spirals_get(void *ctx, int64_t i, void *input, void *target, uint64_t seed) {
    spirals *s = ctx;
    double t = 0.5 + s->turns * 2 * M_PI * (double)(i / 2) / (double)s->n, a = t + (double)(i % 2) * M_PI;
    ((float *)input)[0] = (float)(t * cos(a) / 5);
    ((float *)input)[1] = (float)(t * sin(a) / 5);
    *(int64_t *)target = i % 2;
    return (void)seed, KILN_OK;
}

int main(int argc, char **argv) {
    long epochs = 20;
    if ((argc > 1 && sscanf(argv[1], "%ld", &epochs) != 1) || epochs < 1) return fprintf(stderr, "usage: %s [EPOCHS]\n", argv[0]), 2;
    spirals s = {512, 1.5};
    kiln_dataset *data = kiln_dataset_new((kiln_dataset_desc){KILN_F32, KILN_I64, KILN_SHAPE(2), KILN_SCALAR_SHAPE, spirals_length, spirals_get, NULL}, &s);
    kiln_loader *loader = kiln_loader_new(data, kiln_loader_defaults(32)); /* 2 workers, shuffled */
    kiln_module *layers[] = {kiln_linear_new(2, 64, true, 1), kiln_tanh_new(), kiln_linear_new(64, 64, true, 2), kiln_tanh_new(),
                             kiln_linear_new(64, 2, true, 3)};
    kiln_module *model = kiln_sequential_new(5, layers);
    kiln_optimizer *opt = kiln_adam_new(model, (kiln_adam_options){.lr = 1e-2});
    for (long epoch = 0; epoch < epochs; epoch++) {
        double total = 0, l;
        kiln_tensor x, y;
        kiln_status st;
        kiln_loader_start_epoch(loader, epoch);
        while ((st = kiln_loader_next(loader, &x, &y)) != KILN_DONE) {
            kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(model, x), y, kiln_cross_entropy_defaults());
            if (st != KILN_OK || kiln_train_step(opt, loss, &l) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
            total += l;
        }
        printf("epoch %ld loss %.4f\n", epoch + 1, total / (double)kiln_loader_batches(loader));
    }
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    kiln_loader_free(loader);
    kiln_dataset_free(data);
}
