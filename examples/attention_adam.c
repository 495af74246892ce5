/* A pre-norm self-attention block (token and position embeddings, MultiheadAttention and a
 * feed-forward layer, each behind a LayerNorm and added back as a residual) trained with Adam to
 * reverse random token sequences; prints the loss as it falls and the share of tokens a fresh
 * batch gets right. bench/peers/example_attention_adam.py is the same program in PyTorch.
 * Usage: attention_adam [--steps N] */
#include <getopt.h>
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>

enum { V = 10, L = 8, D = 32, N = 32 };

static kiln_tensor block(kiln_module *m, kiln_tensor x, void *ctx) {
    (void)ctx;
    kiln_tensor h = kiln_add(kiln_module_forward(kiln_module_child(m, "embed"), x), kiln_module_param(m, "pos"));
    kiln_tensor a = kiln_module_forward(kiln_module_child(m, "norm1"), kiln_ref(h));
    h = kiln_add(h, kiln_module_forward(kiln_module_child(m, "attn"), a));
    kiln_tensor f = kiln_module_forward(kiln_module_child(m, "norm2"), kiln_ref(h));
    h = kiln_add(h, kiln_module_forward(kiln_module_child(m, "ff"), f));
    return kiln_module_forward(kiln_module_child(m, "head"), h);
}

/* A batch of random sequences [N, L]. */
static kiln_tensor tokens(uint64_t seed) {
    return kiln_cast(kiln_mul_scalar(kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(N, L), seed), V), KILN_I64);
}

int main(int argc, char **argv) {
    const char *usage = "usage: attention_adam [--steps N] (N from 1 to 1000000, default 300)\n";
    const struct option opts[] = {{"steps", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
    long steps = 300;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end = "";
        if (c == 'h') return fputs(usage, stdout), 0;
        if (c == 's') steps = strtol(optarg, &end, 10);
        if (c != 's' || end == optarg || *end || steps < 1 || steps > 1000000) return fputs(usage, stderr), 2;
    }
    if (optind < argc) return fputs(usage, stderr), 2;
    kiln_module *model = kiln_module_new("Block", block, NULL, NULL);
    kiln_multihead_attention_options mo = kiln_multihead_attention_defaults(D, 4);
    mo.batch_first = true;
    kiln_module *ff[] = {kiln_linear_new(D, 4 * D, true, 4), kiln_gelu_new(), kiln_linear_new(4 * D, D, true, 5)};
    kiln_module_add_child(model, "embed", kiln_embedding_new(V, D, 1));
    kiln_module_add_parameter(model, "pos", kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(L, D), 0, 0.1, 2));
    kiln_module_add_child(model, "norm1", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(model, "attn", kiln_multihead_attention_new(mo, 3));
    kiln_module_add_child(model, "norm2", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(model, "ff", kiln_sequential_new(3, ff));
    kiln_module_add_child(model, "head", kiln_linear_new(D, V, true, 6));
    kiln_adam_options ao = kiln_adam_defaults();
    ao.lr = 3e-3;
    kiln_optimizer *opt = kiln_adam_new(model, ao);
    for (long step = 1; step <= steps; step++) {
        kiln_tensor x = tokens((uint64_t)step);
        kiln_tensor y = kiln_reshape(kiln_flip(kiln_ref(x), KILN_DIMS(1)), KILN_SHAPE(N * L));
        kiln_tensor logits = kiln_reshape(kiln_module_forward(model, x), KILN_SHAPE(N * L, V));
        double l;
        if (kiln_train_step(opt, kiln_cross_entropy(logits, y, kiln_cross_entropy_defaults()), &l) != KILN_OK)
            return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 25 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
    }
    kiln_tensor x = tokens(0);
    kiln_tensor reversed = kiln_flip(kiln_ref(x), KILN_DIMS(1));
    kiln_tensor hits = kiln_eq(kiln_argmax(kiln_module_forward(model, x), 2, false), reversed);
    float right;
    if (kiln_into_scalar(kiln_mean(kiln_cast(hits, KILN_F32)), &right) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    printf("tokens right %.3f\n", right);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    return 0;
}
