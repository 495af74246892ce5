/* What TensorBoard logging costs a Fashion-MNIST epoch (issue 30: under 2%). The MLP of
 * examples/fashion_mnist (784-256-128-10, Adam, batch 128, two loader threads) trains epoch
 * after epoch in one process; each round runs one plain and one logged epoch, alternating which
 * goes first. A logged epoch logs what `fashion_mnist --logdir` does: each step's loss (a tensor),
 * learning rate and step time, the mean loss and accuracy every 50 steps, the last step's
 * gradient histograms and the epoch's weight histograms, then a flush so the writer's work is
 * inside the epoch. On a shared machine the load drifts between rounds more than by 2%, so the
 * result is the median over rounds of each round's ratio logged / plain (the two epochs of a
 * round are next to each other in time), with a 95% confidence interval of that median from the
 * order statistics; for wall time and for the process's CPU time (getrusage: every thread, user +
 * system), which other work disturbs less. Also per logged epoch: the CPU time of the writer's
 * thread and the time the training thread spent inside the logging calls.
 *
 *   bench_tensorboard [--runs ROUNDS] [--data DIR] */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

typedef struct {
    kiln_module *model;
    kiln_optimizer *opt;
    kiln_loader *loader;
    kiln_metrics *metrics;
    int64_t step;
} trainer;

static double rusage_cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* The thread ids of this process, up to max; returns how many. */
static int thread_ids(pid_t *ids, int max) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) && n < max;)
        if (e->d_name[0] != '.') ids[n++] = (pid_t)atoi(e->d_name);
    if (d) closedir(d);
    return n;
}

/* The CPU-time clock of thread tid of this process (Linux's encoding, as glibc's
 * pthread_getcpuclockid builds it), or -1 when tid is 0. */
static clockid_t thread_clock(pid_t tid) { return tid ? (clockid_t)(((unsigned)~tid << 3) | 6) : (clockid_t)-1; }

static double clock_ms(clockid_t c) {
    struct timespec ts;
    if (c == (clockid_t)-1 || clock_gettime(c, &ts) != 0) return 0;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

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

typedef struct {
    double wall, cpu, writer_cpu, in_log; /* ms */
    double scalars_cpu;                   /* replay: the CPU time of the scalars' part (their writing included) */
} measures;

/* One epoch; with w, logged (its thread's CPU time read from writer_clock). */
static measures epoch(trainer *t, kiln_summary_writer *w, int epoch_no, clockid_t writer_clock) {
    double t0 = bench_now_ms(), c0 = rusage_cpu_ms(), wc0 = clock_ms(writer_clock), t_step = t0, in_log = 0;
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
    return (measures){.wall = bench_now_ms() - t0, .cpu = rusage_cpu_ms() - c0, .writer_cpu = clock_ms(writer_clock) - wc0,
                      .in_log = in_log};
}

/* An epoch's logging alone, no training: the same adds (the loss a ready tensor), the twelve
 * histograms (the weights twice: the gradients have their shapes) and the flush. What logging
 * adds to an epoch, less any slowdown of the training it runs beside. */
static measures replay(trainer *t, kiln_summary_writer *w, clockid_t writer_clock) {
    static int64_t step = 1000000000; /* its own steps */
    float v = 0.5f;
    kiln_tensor loss = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(1), &v);
    double t0 = bench_now_ms(), c0 = rusage_cpu_ms(), wc0 = clock_ms(writer_clock), t_step = t0;
    int64_t batches = kiln_loader_batches(t->loader);
    for (int64_t b = 1; b <= batches; b++) {
        double l0 = bench_now_ms();
        step++;
        bench_check(kiln_summary_writer_add_scalar_tensor(w, "train/loss", kiln_ref(loss), step), "add_scalar_tensor");
        bench_check(kiln_summary_writer_add_scalar(w, "train/lr", 1e-3, step), "add_scalar");
        bench_check(kiln_summary_writer_add_scalar(w, "time/step_ms", l0 - t_step, step), "add_scalar");
        t_step = l0;
        if (b % 50 == 0 || b == batches) {
            bench_check(kiln_summary_writer_add_scalar(w, "train/mean_loss", 0.5, step), "add_scalar");
            bench_check(kiln_summary_writer_add_scalar(w, "train/accuracy", 0.8, step), "add_scalar");
        }
    }
    bench_check(kiln_summary_writer_flush(w), "flush");
    double scalars_cpu = rusage_cpu_ms() - c0;
    histograms(w, t->model, NULL, step);
    histograms(w, t->model, NULL, step);
    bench_check(kiln_summary_writer_flush(w), "flush");
    kiln_release(loss);
    return (measures){.wall = bench_now_ms() - t0, .cpu = rusage_cpu_ms() - c0, .writer_cpu = clock_ms(writer_clock) - wc0,
                      .scalars_cpu = scalars_cpu};
}

/* The median of v (n values, sorted in place) and a 95% confidence interval for it: the order
 * statistics n/2 -+ 0.98 sqrt(n) (the binomial's normal approximation). */
static void median_ci(double *v, int n, double *med, double *lo, double *hi) {
    *med = bench_quantile(v, n, 0.5);
    int k = (int)(0.98 * sqrt((double)n) + 0.5), a = (n - 1) / 2 - k, b = n / 2 + k;
    *lo = v[a < 0 ? 0 : a];
    *hi = v[b >= n ? n - 1 : b];
}

int main(int argc, char **argv) {
    int rounds = bench_runs(argc, argv, 30);
    if (rounds < 1) rounds = 1;
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
    measures warm = epoch(&t, NULL, 0, (clockid_t)-1); /* first touches, caches, the thread pool */
    (void)warm;
    /* the writer's thread: the one thread that opening it adds */
    pid_t before[256], after[256], writer_tid = 0;
    int nb = thread_ids(before, 256);
    kiln_summary_writer *w = kiln_summary_writer_open(logdir);
    if (!w) bench_check(kiln_last_status(), "kiln_summary_writer_open");
    int na = thread_ids(after, 256);
    for (int i = 0; i < na; i++) {
        bool old = false;
        for (int j = 0; j < nb; j++) old |= after[i] == before[j];
        if (!old) writer_tid = writer_tid ? -1 : after[i]; /* more than one new thread: unknown */
    }
    clockid_t writer_clock = thread_clock(writer_tid > 0 ? writer_tid : 0);
    double *wall_ratio = calloc((size_t)rounds, sizeof(double)), *cpu_ratio = calloc((size_t)rounds, sizeof(double));
    double *plain_wall = calloc((size_t)rounds, sizeof(double)), *plain_cpu = calloc((size_t)rounds, sizeof(double));
    double *writer_cpu = calloc((size_t)rounds, sizeof(double)), *in_log = calloc((size_t)rounds, sizeof(double));
    double *alone_wall = calloc((size_t)rounds, sizeof(double)), *alone_cpu = calloc((size_t)rounds, sizeof(double));
    double *alone_writer = calloc((size_t)rounds, sizeof(double)), *alone_scalars = calloc((size_t)rounds, sizeof(double));
    if (!wall_ratio || !cpu_ratio || !plain_wall || !plain_cpu || !writer_cpu || !in_log || !alone_wall || !alone_cpu || !alone_writer || !alone_scalars)
        bench_check(KILN_ERR_OUT_OF_MEMORY, "allocating");
    for (int r = 0; r < rounds; r++) {
        measures plain = {0}, logged = {0};
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (r % 2 == 1)) logged = epoch(&t, w, 2 * r + k + 1, writer_clock);
            else plain = epoch(&t, NULL, 2 * r + k + 1, writer_clock);
        }
        wall_ratio[r] = logged.wall / plain.wall - 1, cpu_ratio[r] = logged.cpu / plain.cpu - 1;
        plain_wall[r] = plain.wall, plain_cpu[r] = plain.cpu, writer_cpu[r] = logged.writer_cpu, in_log[r] = logged.in_log;
        measures alone = replay(&t, w, writer_clock);
        alone_wall[r] = alone.wall, alone_cpu[r] = alone.cpu, alone_writer[r] = alone.writer_cpu, alone_scalars[r] = alone.scalars_cpu;
        printf("round %d: plain %.1f ms (%.0f ms CPU), logged %.1f ms (%.0f ms CPU, writer thread %.2f ms, %.2f ms in the "
               "logging calls): wall %+.2f%%, CPU %+.2f%%; logging alone %.2f ms (%.2f ms CPU, the scalars %.2f, writer thread %.2f)\n",
               r + 1, plain.wall, plain.cpu, logged.wall, logged.cpu, logged.writer_cpu, logged.in_log, 100 * wall_ratio[r],
               100 * cpu_ratio[r], alone.wall, alone.cpu, alone.scalars_cpu, alone.writer_cpu);
        fflush(stdout);
    }
    double wm, wlo, whi, cm, clo, chi, pw, pc, wc, li, aw, ac, awr, as, x;
    median_ci(alone_scalars, rounds, &as, &x, &x);
    median_ci(alone_wall, rounds, &aw, &x, &x);
    median_ci(alone_cpu, rounds, &ac, &x, &x);
    median_ci(alone_writer, rounds, &awr, &x, &x);
    median_ci(wall_ratio, rounds, &wm, &wlo, &whi);
    median_ci(cpu_ratio, rounds, &cm, &clo, &chi);
    median_ci(plain_wall, rounds, &pw, &x, &x);
    median_ci(plain_cpu, rounds, &pc, &x, &x);
    median_ci(writer_cpu, rounds, &wc, &x, &x);
    median_ci(in_log, rounds, &li, &x, &x);
    printf("%d rounds, medians: plain epoch %.1f ms wall, %.0f ms CPU; logged/plain - 1: wall %+.2f%% (95%% CI %+.2f..%+.2f), "
           "CPU %+.2f%% (95%% CI %+.2f..%+.2f); writer thread %.2f ms CPU (%.2f%% of the plain epoch's CPU); %.2f ms in the "
           "logging calls (%.2f%% of the epoch)\n",
           rounds, pw, pc, 100 * wm, 100 * wlo, 100 * whi, 100 * cm, 100 * clo, 100 * chi, wc, 100 * wc / pc, li, 100 * li / pw);
    printf("an epoch's logging alone, medians: %.2f ms wall (%.2f%% of the plain epoch), %.2f ms CPU (%.2f%% of its CPU): the "
           "scalars %.2f ms, the histograms the rest; the writer thread %.2f ms of it\n",
           aw, 100 * aw / pw, ac, 100 * ac / pc, as, awr);
    char extra[256];
    snprintf(extra, sizeof extra, ",\"plain_ms\":%.1f,\"wall_overhead_pct\":%.2f,\"cpu_overhead_pct\":%.2f,\"cpu_overhead_ci_hi_pct\":%.2f,\"writer_cpu_ms\":%.2f,\"alone_cpu_pct\":%.2f",
             pw, 100 * wm, 100 * cm, 100 * chi, wc, 100 * ac / pc);
    bench_report("tensorboard_logged_epoch", pw * (1 + wm), extra);
    kiln_summary_writer_free(w);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", logdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", logdir);
    free(wall_ratio), free(cpu_ratio), free(plain_wall), free(plain_cpu), free(writer_cpu), free(in_log);
    free(alone_wall), free(alone_cpu), free(alone_writer), free(alone_scalars);
    kiln_metrics_free(t.metrics);
    kiln_loader_free(t.loader);
    kiln_optimizer_free(t.opt);
    kiln_module_free(t.model);
    kiln_dataset_free(ds);
    return 0;
}
