/* What TensorBoard logging costs a Fashion-MNIST epoch (issue 30: under 2%). The MLP of
 * examples/fashion_mnist (784-256-128-10, Adam, batch 128, two loader threads) trains epoch
 * after epoch in one process, every other epoch logging as `fashion_mnist --logdir` does: each
 * step's loss (a tensor), learning rate and step time, the mean loss and accuracy every 50
 * steps, the last step's gradient histograms and the epoch's weight histograms, and a flush at
 * the end so the writer's work is inside the epoch. Pairs alternate which side goes first.
 * Prints each pair, the medians of wall and CPU time (CPU: every thread of the process; steadier
 * on a shared machine) and the time the training thread spent in the logging calls.
 *
 *   bench_tensorboard [--runs PAIRS] [--data DIR] */
#include <stdint.h>
#include <unistd.h>

#include "bench.h"

typedef struct {
    kiln_module *model;
    kiln_optimizer *opt;
    kiln_loader *loader;
    kiln_metrics *metrics;
    int64_t step;
} trainer;

static void histograms(kiln_summary_writer *w, kiln_module *model, kiln_grads *g, int64_t step) {
    kiln_param params[16];
    int n = kiln_module_params(model, params, 16);
    for (int i = 0; i < n && i < 16; i++) {
        char tag[128];
        snprintf(tag, sizeof tag, "%s/%.96s", g ? "grads" : "weights", params[i].name);
        kiln_tensor t = g ? kiln_grad(g, *params[i].slot) : kiln_ref(*params[i].slot);
        if (t.id) bench_check(kiln_summary_writer_add_histogram(w, tag, t, step), "add_histogram");
    }
}

/* One epoch; with w, logged. Returns wall ms; *cpu_ms the process's CPU ms, *log_ms the time
 * inside the logging calls. */
static double epoch(trainer *t, kiln_summary_writer *w, int epoch_no, double *cpu_ms, double *log_ms) {
    double t0 = bench_now_ms(), c0 = bench_cpu_ms(), t_step = t0, in_log = 0;
    kiln_cross_entropy_options ce = kiln_cross_entropy_defaults();
    bench_check(kiln_loader_start_epoch(t->loader, epoch_no), "start_epoch");
    int64_t batches = kiln_loader_batches(t->loader);
    kiln_tensor x, y;
    for (int64_t b = 1; kiln_loader_next(t->loader, &x, &y) == KILN_OK; b++) {
        kiln_tensor logits = kiln_module_forward(t->model, x);
        kiln_tensor loss = kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), ce);
        kiln_metrics_add(t->metrics, kiln_ref(loss), logits, y);
        double lr = 1e-3;
        t->step++;
        double l0 = bench_now_ms();
        if (w) {
            bench_check(kiln_summary_writer_add_scalar_tensor(w, "train/loss", kiln_ref(loss), t->step), "add_scalar_tensor");
            bench_check(kiln_summary_writer_add_scalar(w, "train/lr", lr, t->step), "add_scalar");
            bench_check(kiln_summary_writer_add_scalar(w, "time/step_ms", l0 - t_step, t->step), "add_scalar");
        }
        in_log += bench_now_ms() - l0;
        t_step = l0;
        kiln_grads *g = NULL;
        bench_check(kiln_backward(loss, &g), "backward");
        if (w && b == batches) {
            l0 = bench_now_ms();
            histograms(w, t->model, g, t->step);
            in_log += bench_now_ms() - l0;
        }
        bench_check(kiln_optimizer_step(t->opt, g), "optimizer_step");
        kiln_grads_free(g);
        if (b % 50 == 0 || b == batches) {
            double mean_loss, accuracy;
            bench_check(kiln_metrics_read(t->metrics, &mean_loss, &accuracy, NULL), "metrics_read");
            l0 = bench_now_ms();
            if (w) {
                bench_check(kiln_summary_writer_add_scalar(w, "train/mean_loss", mean_loss, t->step), "add_scalar");
                bench_check(kiln_summary_writer_add_scalar(w, "train/accuracy", accuracy, t->step), "add_scalar");
            }
            in_log += bench_now_ms() - l0;
        }
    }
    bench_check(kiln_sync(), "sync");
    if (w) {
        double l0 = bench_now_ms();
        histograms(w, t->model, NULL, t->step);
        bench_check(kiln_summary_writer_flush(w), "flush"); /* the writer's work counts too */
        in_log += bench_now_ms() - l0;
    }
    *cpu_ms = bench_cpu_ms() - c0;
    *log_ms = in_log;
    return bench_now_ms() - t0;
}

int main(int argc, char **argv) {
    int pairs = bench_runs(argc, argv, 6);
    const char *data = "/usr/share/datasets/fashion-mnist";
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--data")) data = argv[i + 1];
    char images[512], labels[512], logdir[] = "/tmp/kiln_tb_bench_XXXXXX";
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", data);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", data);
    const double mean = 0.2860, std = 0.3530;
    kiln_dataset *ds = kiln_idx_dataset_new(images, labels);
    if (!ds) bench_check(KILN_ERR_IO, "loading Fashion-MNIST");
    ds = kiln_transform_normalize(ds, 1, &mean, &std);
    kiln_module *layers[] = {kiln_flatten_new(1, -1), kiln_linear_new(784, 256, true, 1), kiln_relu_new(),
                             kiln_linear_new(256, 128, true, 2), kiln_relu_new(), kiln_linear_new(128, 10, true, 3)};
    trainer t = {.model = kiln_sequential_new(6, layers), .metrics = kiln_metrics_new()};
    t.opt = kiln_adam_new(t.model, kiln_adam_defaults());
    kiln_loader_options lo = kiln_loader_defaults(128);
    lo.workers = 2;
    t.loader = kiln_loader_new(ds, lo);
    if (!t.model || !t.opt || !t.loader || !t.metrics || !mkdtemp(logdir)) bench_check(KILN_ERR_INTERNAL, "setting up");
    kiln_summary_writer *w = kiln_summary_writer_open(logdir);
    if (!w) bench_check(kiln_last_status(), "kiln_summary_writer_open");
    double c, l, warm = epoch(&t, NULL, 0, &c, &l); /* first touches, caches */
    (void)warm;
    double *plain = calloc((size_t)pairs, sizeof *plain), *logged = calloc((size_t)pairs, sizeof *logged);
    double *plain_cpu = calloc((size_t)pairs, sizeof *plain_cpu), *logged_cpu = calloc((size_t)pairs, sizeof *logged_cpu);
    double *in_log = calloc((size_t)pairs, sizeof *in_log);
    for (int r = 0; r < pairs; r++) {
        bool logged_first = r % 2;
        for (int k = 0; k < 2; k++) {
            bool log = (k == 0) == logged_first;
            if (log) logged[r] = epoch(&t, w, 2 * r + k + 1, &logged_cpu[r], &in_log[r]);
            else plain[r] = epoch(&t, NULL, 2 * r + k + 1, &plain_cpu[r], &l);
        }
        printf("pair %d: plain %.1f ms (%.0f ms CPU), logged %.1f ms (%.0f ms CPU, %.2f ms in the logging calls)\n", r + 1,
               plain[r], plain_cpu[r], logged[r], logged_cpu[r], in_log[r]);
        fflush(stdout);
    }
    double mp = bench_quantile(plain, pairs, 0.5), ml = bench_quantile(logged, pairs, 0.5);
    double cp = bench_quantile(plain_cpu, pairs, 0.5), cl = bench_quantile(logged_cpu, pairs, 0.5);
    double li = bench_quantile(in_log, pairs, 0.5);
    printf("median epoch: plain %.1f ms, logged %.1f ms (%+.2f%%); CPU %.0f against %.0f ms (%+.2f%%); %.2f ms in the "
           "logging calls (%.2f%% of the epoch)\n",
           mp, ml, 100 * (ml / mp - 1), cp, cl, 100 * (cl / cp - 1), li, 100 * li / mp);
    char extra[160];
    snprintf(extra, sizeof extra, ",\"plain_ms\":%.1f,\"cpu_overhead_pct\":%.2f", mp, 100 * (cl / cp - 1));
    bench_report("tensorboard_logged_epoch", ml, extra);
    kiln_summary_writer_free(w);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", logdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", logdir);
    free(plain), free(logged), free(plain_cpu), free(logged_cpu), free(in_log);
    kiln_metrics_free(t.metrics);
    kiln_loader_free(t.loader);
    kiln_optimizer_free(t.opt);
    kiln_module_free(t.model);
    kiln_dataset_free(ds);
    return 0;
}
