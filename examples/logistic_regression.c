/* Logistic regression on generated data: a weight vector and a bias, plain tensors marked with
 * kiln_require_grad, optimized by SGD over the parameter list with binary cross-entropy on the
 * logits; prints the loss as it falls and the training accuracy.
 * bench/peers/example_logistic_regression.py is the same program in PyTorch.
 * Usage: logistic_regression [--steps N] */
#include <getopt.h>
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 512, D = 8 };

int main(int argc, char **argv) {
    const char *usage = "usage: logistic_regression [--steps N] (N from 1 to 1000000, default 200)\n";
    const struct option opts[] = {{"steps", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {0}};
    long steps = 200;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        char *end = "";
        if (c == 'h') return fputs(usage, stdout), 0;
        if (c == 's') steps = strtol(optarg, &end, 10);
        if (c != 's' || end == optarg || *end || steps < 1 || steps > 1000000) return fputs(usage, stderr), 2;
    }
    if (optind < argc) return fputs(usage, stderr), 2;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, D), 1);
    kiln_tensor score = kiln_matmul(kiln_ref(x), kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(D, 1), 2));
    score = kiln_add(score, kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(N, 1), 0, 0.1, 3));
    kiln_tensor y = kiln_cast(kiln_gt_scalar(score, 0), KILN_F32);
    kiln_tensor w = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(D, 1)));
    kiln_tensor b = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1)));
    kiln_optimizer *opt = kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, (kiln_sgd_options){.lr = 0.5});
    for (long step = 1; step <= steps; step++) {
        kiln_tensor logits = kiln_add(kiln_matmul(kiln_ref(x), kiln_ref(w)), kiln_ref(b));
        double l;
        if (kiln_train_step(opt, kiln_bce_with_logits(logits, kiln_ref(y)), &l) != KILN_OK)
            return fprintf(stderr, "%s\n", kiln_last_error()), 1;
        if (step == 1 || step % 20 == 0 || step == steps) printf("step %ld loss %.4f\n", step, l);
    }
    kiln_tensor predicted = kiln_gt_scalar(kiln_add(kiln_matmul(x, kiln_ref(w)), kiln_ref(b)), 0);
    float acc;
    if (kiln_into_scalar(kiln_mean(kiln_cast(kiln_eq(kiln_cast(predicted, KILN_F32), y), KILN_F32)), &acc) != KILN_OK)
        return fprintf(stderr, "%s\n", kiln_last_error()), 1;
    printf("accuracy %.3f\n", acc);
    kiln_optimizer_free(opt);
    kiln_release(w);
    kiln_release(b);
    return 0;
}
