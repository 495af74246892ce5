/* A character-level LSTM language model (Embedding -> LSTM -> Linear) trained with Adam on
 * windows of a short generated text; prints the loss as it falls. bench/peers/example_char_lstm.py
 * is the same program in PyTorch.  Usage: char_lstm [--steps N] */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char TEXT[] = "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. ";
enum { V = 28, N = 16, T = 32, E = 16, H = 64 };

static int32_t code(char c) { return c == ' ' ? 26 : c == '.' ? 27 : c - 'a'; }

int main(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return printf("usage: %s [--steps N]\n", argv[0]), 0;
    char *end = "";
    long steps = argc == 1 ? 200 : argc == 3 && strcmp(argv[1], "--steps") == 0 ? strtol(argv[2], &end, 10) : 0;
    if (*end || steps < 1 || steps > 1000000) return fprintf(stderr, "usage: %s [--steps N]\n", argv[0]), 2;
    kiln_rnn_options o = kiln_rnn_defaults(E, H);
    o.batch_first = true;
    kiln_module *layers[] = {kiln_embedding_new(V, E, 1), kiln_lstm_new(o, 2), kiln_linear_new(H, V, true, 3)};
    kiln_module *model = kiln_sequential_new(3, layers);
    kiln_adam_options ao = kiln_adam_defaults();
    ao.lr = 1e-2;
    kiln_optimizer *opt = kiln_adam_new(model, ao);
    size_t len = strlen(TEXT);
    srand(0);
    for (long step = 1; step <= steps; step++) {
        int32_t x[N * T], y[N * T];
        for (int i = 0; i < N; i++)
            for (size_t t = 0, at = (size_t)rand() % len; t < T; t++) {
                x[i * T + t] = code(TEXT[(at + t) % len]);
                y[i * T + t] = code(TEXT[(at + t + 1) % len]);
            }
        kiln_tensor logits = kiln_module_forward(model, kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(N, T), x));
        kiln_tensor loss = kiln_cross_entropy(kiln_reshape(logits, KILN_SHAPE(N * T, V)),
                                              kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(N * T), y),
                                              kiln_cross_entropy_defaults());
        double l;
        if (kiln_train_step(opt, loss, &l) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 20 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
    }
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    return 0;
}
