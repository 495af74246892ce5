/* A character-level transformer language model (token and position embeddings, one pre-norm
 * block of causal self-attention and a feed-forward layer) trained with Adam on windows of a
 * short text, then asked for LENGTH characters after "the " by greedy decoding (the most likely
 * next character each time). char_transformer.py beside it is the same program in PyTorch.
 * Usage: char_transformer [STEPS [LENGTH]] */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char TEXT[] = "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. ";
static const char CHARS[] = "abcdefghijklmnopqrstuvwxyz .";
enum { V = 28, L = 32, D = 32, N = 16, MAX_LENGTH = 100000 };

static kiln_tensor forward(kiln_module *m, kiln_tensor x, void *ctx) {
    (void)ctx;
    int64_t t = kiln_tensor_shape(x).dims[1];
    kiln_tensor h = kiln_add(kiln_module_forward(kiln_module_child(m, "embed"), x),
                             kiln_narrow(kiln_module_param(m, "pos"), 0, 0, t));
    kiln_tensor n = kiln_module_forward(kiln_module_child(m, "norm1"), kiln_ref(h));
    kiln_tensor q = kiln_module_forward(kiln_module_child(m, "q"), kiln_ref(n));
    kiln_tensor k = kiln_module_forward(kiln_module_child(m, "k"), kiln_ref(n));
    h = kiln_add(h, kiln_scaled_dot_product_attention(q, k, kiln_module_forward(kiln_module_child(m, "v"), n), KILN_NONE, true, 0));
    kiln_tensor f = kiln_module_forward(kiln_module_child(m, "norm2"), kiln_ref(h));
    f = kiln_module_forward(kiln_module_child(m, "ff"), f);
    return kiln_module_forward(kiln_module_child(m, "head"), kiln_add(h, f));
}

int main(int argc, char **argv) {
    long steps = 300, length = 60;
    if ((argc > 1 && sscanf(argv[1], "%ld", &steps) != 1) || (argc > 2 && sscanf(argv[2], "%ld", &length) != 1) ||
        steps < 1 || length < 1 || length > MAX_LENGTH) return fprintf(stderr, "usage: %s [STEPS [LENGTH]]\n", argv[0]), 2;
    kiln_module *model = kiln_module_new("CharTransformer", forward, NULL, NULL);
    kiln_module *ff[] = {kiln_linear_new(D, 4 * D, true, 6), kiln_gelu_new(), kiln_linear_new(4 * D, D, true, 7)};
    kiln_module_add_child(model, "embed", kiln_embedding_new(V, D, 1));
    kiln_module_add_parameter(model, "pos", kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(L, D), 0, 0.02, 2));
    kiln_module_add_child(model, "norm1", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(model, "q", kiln_linear_new(D, D, false, 3));
    kiln_module_add_child(model, "k", kiln_linear_new(D, D, false, 4));
    kiln_module_add_child(model, "v", kiln_linear_new(D, D, false, 5));
    kiln_module_add_child(model, "norm2", kiln_layer_norm_new(D, 1e-5, true));
    kiln_module_add_child(model, "ff", kiln_sequential_new(3, ff));
    kiln_module_add_child(model, "head", kiln_linear_new(D, V, true, 8));
    kiln_optimizer *opt = kiln_adam_new(model, (kiln_adam_options){.lr = 3e-3});
    size_t len = strlen(TEXT);
    srand(0);
    for (long step = 1; step <= steps; step++) {
        int32_t x[N * L], y[N * L];
        for (int i = 0; i < N; i++)
            for (size_t t = 0, at = (size_t)rand() % len; t < L; t++) {
                x[i * L + t] = (int32_t)(strchr(CHARS, TEXT[(at + t) % len]) - CHARS);
                y[i * L + t] = (int32_t)(strchr(CHARS, TEXT[(at + t + 1) % len]) - CHARS);
            }
        kiln_tensor logits = kiln_module_forward(model, kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(N, L), x));
        kiln_tensor targets = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(N * L), y);
        kiln_tensor loss = kiln_cross_entropy(kiln_reshape(logits, KILN_SHAPE(N * L, V)), targets, kiln_cross_entropy_defaults());
        double l;
        if (kiln_train_step(opt, loss, &l) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 50 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
    }
    static char text[4 + MAX_LENGTH + 1] = "the ";
    int32_t ctx[L];
    kiln_no_grad_begin();
    for (long n = 4; n < length + 4; n++) {
        int64_t t = n < L ? n : L, next;
        for (int64_t i = 0; i < t; i++) ctx[i] = (int32_t)(strchr(CHARS, text[n - t + i]) - CHARS);
        kiln_tensor logits = kiln_module_forward(model, kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(1, t), ctx));
        if (kiln_into_data(kiln_argmax(kiln_narrow(logits, 1, t - 1, 1), -1, false), &next, sizeof next) != KILN_OK)
            return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        text[n] = CHARS[next];
    }
    kiln_no_grad_end();
    printf("%s\n", text);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
}
