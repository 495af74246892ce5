/* A one-block transformer-encoder classifier (token and position embeddings, self-attention
 * with MultiheadAttention, a feed-forward layer, residuals and layer norms, mean pooling) that
 * learns whether token 0 occurs more often than token 1 in a random sequence; prints the loss
 * and the accuracy on a fresh batch. bench/peers/example_transformer.py is the same program in
 * PyTorch.  Usage: transformer_classifier [--steps N] */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 8, L = 12, D = 32, N = 64 };

static kiln_tensor encoder(kiln_module *m, kiln_tensor x, void *ctx) {
    (void)ctx;
    kiln_tensor h = kiln_add(kiln_module_forward(kiln_module_child(m, "embed"), x), kiln_module_param(m, "pos"));
    kiln_tensor a = kiln_multihead_attention(kiln_module_child(m, "attn"), kiln_ref(h), kiln_ref(h), kiln_ref(h),
                                             KILN_NONE, KILN_NONE, NULL);
    h = kiln_module_forward(kiln_module_child(m, "norm1"), kiln_add(h, a));
    kiln_tensor f = kiln_module_forward(kiln_module_child(m, "ff"), kiln_ref(h));
    h = kiln_module_forward(kiln_module_child(m, "norm2"), kiln_add(h, f));
    return kiln_module_forward(kiln_module_child(m, "head"), kiln_mean_dims(h, KILN_DIMS(1), false));
}

/* A batch of random sequences and their labels: more 0s than 1s. */
static void batch(kiln_tensor *x, kiln_tensor *y) {
    int32_t tok[N * L], label[N];
    for (int i = 0; i < N; i++) {
        int count[2] = {0, 0};
        for (int t = 0; t < L; t++)
            if ((tok[i * L + t] = rand() % V) < 2) count[tok[i * L + t]]++;
        label[i] = count[0] > count[1];
    }
    *x = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(N, L), tok);
    *y = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(N), label);
}

int main(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return printf("usage: %s [--steps N]\n", argv[0]), 0;
    char *end = "";
    long steps = argc == 1 ? 300 : argc == 3 && strcmp(argv[1], "--steps") == 0 ? strtol(argv[2], &end, 10) : 0;
    if (*end || steps < 1 || steps > 1000000) return fprintf(stderr, "usage: %s [--steps N]\n", argv[0]), 2;
    kiln_module *model = kiln_module_new("Encoder", encoder, NULL, NULL);
    kiln_multihead_attention_options mo = kiln_multihead_attention_defaults(D, 4);
    mo.batch_first = true;
    kiln_module *ff[] = {kiln_linear_new(D, 2 * D, true, 4), kiln_relu_new(), kiln_linear_new(2 * D, D, true, 5)};
    kiln_module_add_child(model, "embed", kiln_embedding_new(V, D, 1));
    kiln_module_add_parameter(model, "pos", kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(L, D), 0, 0.02, 2));
    kiln_module_add_child(model, "attn", kiln_multihead_attention_new(mo, 3));
    kiln_module_add_child(model, "norm1", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(model, "ff", kiln_sequential_new(3, ff));
    kiln_module_add_child(model, "norm2", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(model, "head", kiln_linear_new(D, 2, true, 6));
    kiln_optimizer *opt = kiln_adam_new(model, kiln_adam_defaults());
    srand(0);
    kiln_tensor x, y;
    for (long step = 1; step <= steps; step++) {
        batch(&x, &y);
        kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(model, x), y, kiln_cross_entropy_defaults());
        double l;
        if (kiln_train_step(opt, loss, &l) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 25 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
    }
    batch(&x, &y);
    float acc;
    kiln_tensor hits = kiln_eq(kiln_argmax(kiln_module_forward(model, x), 1, false), kiln_cast(y, KILN_I64));
    if (kiln_into_scalar(kiln_mean(kiln_cast(hits, KILN_F32)), &acc) != KILN_OK) return 1;
    printf("accuracy %.3f\n", acc);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    return 0;
}
