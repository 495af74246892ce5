/* Trains a classifier on Fashion-MNIST (Debian's dataset-fashion-mnist) with kiln.
 *
 *   fashion_mnist [--model mlp|cnn] [--epochs N] [--batch B] [--lr X] [--workers W]
 *                 [--limit N] [--data DIR] [--checkpoint FILE] [--profile FILE] [--seed S]
 *                 [--device cpu|opencl|opencl:N] [--logdir DIR] [--autocast] [--bench] [--fusion-ab]
 *                 [--help]
 *
 * An MLP (784-256-128-10) by default, a small CNN with --model cnn; Adam with a cosine
 * learning-rate schedule over the whole run. Prints a progress bar
 * (plain lines when stdout is not a terminal), test accuracy after every epoch, and saves a
 * safetensors checkpoint at the end. Metrics (kiln_metrics) accumulate on the device and are
 * read once per logging step through one transaction, so nothing waits per batch. With
 * --logdir DIR it also writes TensorBoard event files (kiln/summary.h): each step's loss (a
 * tensor, read later by the writer's thread), learning rate and step time, the logging steps'
 * mean loss and accuracy, and every epoch the test accuracy and histograms of each weight and
 * of its gradient (computed where they live); `tensorboard --logdir DIR` shows them.
 * --autocast runs the model's forward under bf16 autocast (kiln_module_set_autocast: products
 * and convolutions in bf16 with f32 sums, the loss in f32; weights, gradients and Adam's state
 * stay f32), as torch.autocast("cpu", torch.bfloat16) around the forward.
 *
 * Data parallel without a change: under `mpirun -np N` every rank trains on its shard of each
 * epoch (batch B / N per rank, so the global batch stays B), gradients are averaged by kiln_ddp
 * during backward, metrics are summed over the ranks, rank 0 prints and writes the checkpoint.
 * Started alone it is a world of one. */
#include <errno.h>
#include <getopt.h>
#include <kiln.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    bool bench; /* --bench: print one JSON line (mean epoch time) for bench/run, skip the checkpoint */
    bool autocast; /* --autocast: the forward under bf16 autocast */
    bool fusion_ab; /* --fusion-ab: epochs alternate fusion on and off (unfused, unfused, fused, fused, ...) */
    const char *model, *data, *checkpoint, *profile, *logdir;
    int epochs, workers;
    int64_t batch, limit;
    double lr;
    uint64_t seed;
    kiln_device device;
} options;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of every thread of the process: on a machine loaded past its cores, a steadier
 * measure of the work an epoch costs than its wall time (bench/python/epoch.py prints both). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static const char usage_text[] =
    "usage: fashion_mnist [options]\n"
    "  --model mlp|cnn    the network (default mlp)\n"
    "  --epochs N         epochs to train (default 10 for mlp, 8 for cnn)\n"
    "  --batch B          images per batch (default 128)\n"
    "  --lr X             peak learning rate of the cosine schedule (default 1e-3)\n"
    "  --workers W        loader threads, 0 to 256 (0: load on the training thread; default 2)\n"
    "  --limit N          about N training images per epoch, in whole batches (default all)\n"
    "  --data DIR         where the IDX files are (default /usr/share/datasets/fashion-mnist)\n"
    "  --checkpoint FILE  safetensors checkpoint written at the end\n"
    "                     (default fashion_mnist_mlp.safetensors or fashion_mnist_cnn.safetensors)\n"
    "  --profile FILE     write a Chrome trace of every op to FILE and a summary to stderr\n"
    "  --seed S           seed of the weights, the shuffling and dropout (default 1)\n"
    "  --device D         cpu (default), opencl or opencl:N: where the model trains\n"
    "  --logdir DIR       write TensorBoard event files to DIR (loss, accuracy, learning rate,\n"
    "                     step time, weight and gradient histograms)\n"
    "  --autocast         the forward in bf16 autocast (products bf16, sums and weights f32)\n"
    "  --bench            print one JSON line (mean epoch time) for bench/run; no checkpoint\n"
    "  --fusion-ab        epochs alternate fusion off and on in the order U F F U (repeated),\n"
    "                     each epoch's time beside its setting; --bench adds unfused_ms\n"
    "  -h, --help         print this and exit\n";

/* An integer option's value: the whole string, within [lo, hi] (atoi would read "abc" as 0). */
static bool int_arg(const char *name, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "fashion_mnist: --%s: '%s' is not an integer from %lld to %lld\n", name, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

static bool positive_arg(const char *name, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v) || v <= 0) {
        fprintf(stderr, "fashion_mnist: --%s: '%s' is not a positive number\n", name, s);
        return false;
    }
    *out = v;
    return true;
}

/* Returns the exit status when the program should stop here (2 on a bad option, 0 after
 * --help), -1 to go on. Nothing is loaded before the options are known to be good. */
static int parse(int argc, char **argv, options *o) {
    *o = (options){.model = "mlp", .data = "/usr/share/datasets/fashion-mnist", .workers = 2, .batch = 128, .seed = 1};
    enum { MODEL = 256, EPOCHS, BATCH, LR, WORKERS, LIMIT, DATA, CHECKPOINT, PROFILE, SEED, BENCH, DEVICE, LOGDIR,
           AUTOCAST, FUSION_AB };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, MODEL},     {"epochs", required_argument, NULL, EPOCHS},
        {"batch", required_argument, NULL, BATCH},     {"lr", required_argument, NULL, LR},
        {"workers", required_argument, NULL, WORKERS}, {"limit", required_argument, NULL, LIMIT},
        {"data", required_argument, NULL, DATA},       {"checkpoint", required_argument, NULL, CHECKPOINT},
        {"profile", required_argument, NULL, PROFILE}, {"seed", required_argument, NULL, SEED},
        {"bench", no_argument, NULL, BENCH},           {"help", no_argument, NULL, 'h'},
        {"device", required_argument, NULL, DEVICE},   {"logdir", required_argument, NULL, LOGDIR},
        {"autocast", no_argument, NULL, AUTOCAST},     {"fusion-ab", no_argument, NULL, FUSION_AB},
        {NULL, 0, NULL, 0},
    };
    long long v = 0;
    bool ok = true;
    int at = 0; /* the long option getopt_long found */
    for (int c; ok && (c = getopt_long(argc, argv, "h", longopts, &at)) != -1;) {
        const char *name = longopts[at].name;
        switch (c) {
        case 'h': fputs(usage_text, stdout); return 0;
        case MODEL: o->model = optarg; break;
        case EPOCHS: ok = int_arg(name, optarg, 1, INT_MAX, &v); o->epochs = (int)v; break;
        case BATCH: ok = int_arg(name, optarg, 1, INT64_MAX, &v); o->batch = v; break;
        case LR: ok = positive_arg(name, optarg, &o->lr); break;
        case WORKERS: ok = int_arg(name, optarg, 0, 256, &v); o->workers = (int)v; break;
        case LIMIT: ok = int_arg(name, optarg, 1, INT64_MAX, &v); o->limit = v; break;
        case DATA: o->data = optarg; break;
        case CHECKPOINT: o->checkpoint = optarg; break;
        case PROFILE: o->profile = optarg; break;
        case SEED: ok = int_arg(name, optarg, 0, INT64_MAX, &v); o->seed = (uint64_t)v; break;
        case BENCH: o->bench = true; break;
        case AUTOCAST: o->autocast = true; break;
        case FUSION_AB: o->fusion_ab = true; break;
        case LOGDIR: o->logdir = optarg; break;
        case DEVICE:
            ok = kiln_device_parse(optarg, &o->device) == KILN_OK;
            if (!ok) fprintf(stderr, "fashion_mnist: --device: '%s' is not cpu, opencl or opencl:N\n", optarg);
            break;
        default: ok = false; break; /* getopt_long has named the unknown option or missing value */
        }
    }
    bool cnn = !strcmp(o->model, "cnn");
    if (ok && !cnn && strcmp(o->model, "mlp")) {
        fprintf(stderr, "fashion_mnist: --model: '%s' is not mlp or cnn\n", o->model);
        ok = false;
    }
    if (ok && optind < argc) {
        fprintf(stderr, "fashion_mnist: unexpected argument '%s' (options start with --)\n", argv[optind]);
        ok = false;
    }
    if (!ok) {
        fputs("Try 'fashion_mnist --help'.\n", stderr);
        return 2;
    }
    if (!o->epochs) o->epochs = cnn ? 8 : 10;
    if (o->fusion_ab && o->epochs < 2) {
        fputs("fashion_mnist: --fusion-ab needs --epochs 2 or more (one unfused, one fused)\n", stderr);
        return 2;
    }
    if (!o->lr) o->lr = 1e-3;
    if (!o->checkpoint) o->checkpoint = cnn ? "fashion_mnist_cnn.safetensors" : "fashion_mnist_mlp.safetensors";
    return -1;
}

static kiln_module *build_model(const char *kind, uint64_t seed) {
    if (!strcmp(kind, "cnn")) {
        kiln_conv2d_options c1 = kiln_conv2d_defaults(1, 32, 3), c2 = kiln_conv2d_defaults(32, 64, 3);
        c1.pad_h = c1.pad_w = c2.pad_h = c2.pad_w = 1;
        kiln_module *layers[] = {
            kiln_conv2d_new(c1, seed),        kiln_relu_new(), kiln_max_pool2d_new(2, 2, 0),
            kiln_conv2d_new(c2, seed + 1),    kiln_relu_new(), kiln_max_pool2d_new(2, 2, 0),
            kiln_flatten_new(1, -1),          kiln_linear_new(64 * 7 * 7, 128, true, seed + 2),
            kiln_relu_new(),                  kiln_dropout_new(0.25, seed + 3),
            kiln_linear_new(128, 10, true, seed + 4),
        };
        return kiln_sequential_new((int)(sizeof layers / sizeof layers[0]), layers);
    }
    kiln_module *layers[] = {
        kiln_flatten_new(1, -1),         kiln_linear_new(784, 256, true, seed), kiln_relu_new(),
        kiln_linear_new(256, 128, true, seed + 1), kiln_relu_new(), kiln_linear_new(128, 10, true, seed + 2),
    };
    return kiln_sequential_new((int)(sizeof layers / sizeof layers[0]), layers);
}

/* Fashion-MNIST statistics of the training images (mean and std of all pixels in [0, 1]). */
static kiln_dataset *open_split(const char *dir, bool train, int64_t limit) {
    char images[512], labels[512];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, train ? "train" : "t10k");
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, train ? "train" : "t10k");
    kiln_dataset *ds = kiln_idx_dataset_new(images, labels);
    if (!ds) return NULL;
    (void)limit;
    const double mean = 0.2860, std = 0.3530;
    return kiln_transform_normalize(ds, 1, &mean, &std);
}

static void progress(bool tty, int epoch, int64_t batch, int64_t batches, double loss, double acc, double rate,
                     double eta) {
    if (tty) {
        int width = 30, done = batches ? (int)(width * batch / batches) : width;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < done ? '=' : (i == done ? '>' : ' ');
        bar[width] = '\0';
        printf("\repoch %d [%s] %lld/%lld loss %.4f acc %.3f %6.0f samples/s ETA %4.0fs ", epoch, bar, (long long)batch,
               (long long)batches, loss, acc, rate, eta);
        fflush(stdout);
    } else {
        printf("epoch %d batch %lld/%lld loss %.4f acc %.3f %.0f samples/s ETA %.0fs\n", epoch, (long long)batch,
               (long long)batches, loss, acc, rate, eta);
    }
}

/* Accuracy of the model on a loader, in eval mode, over every rank's shard. One read at the end. */
static double evaluate(kiln_module *model, kiln_loader *loader, kiln_device device, int64_t *count) {
    kiln_module_train(model, false);
    kiln_no_grad_begin();
    kiln_loader_start_epoch(loader, 0);
    kiln_tensor x, y, correct = kiln_zeros(device, KILN_I64, KILN_SCALAR_SHAPE);
    int64_t n = 0;
    kiln_status st;
    while ((st = kiln_loader_next(loader, &x, &y)) == KILN_OK) {
        n += kiln_tensor_dim(y, 0);
        kiln_tensor pred = kiln_argmax(kiln_module_forward(model, x), 1, false);
        correct = kiln_add(correct, kiln_sum(kiln_eq(pred, y)));
    }
    kiln_no_grad_end();
    kiln_module_train(model, true);
    int64_t c[2] = {0, 0}; /* correct, seen: summed over the ranks */
    kiln_tensor both = kiln_stack((kiln_tensor[]){kiln_to_device(correct, KILN_CPU), kiln_full(KILN_CPU, KILN_I64, KILN_SCALAR_SHAPE, (double)n)}, 2, 0);
    if (st != KILN_DONE || kiln_into_data(kiln_dist_all_reduce(both, KILN_DIST_SUM), c, sizeof c) != KILN_OK) {
        fprintf(stderr, "evaluation failed: %s\n", kiln_last_error());
        return -1;
    }
    *count = c[1];
    return c[1] ? (double)c[0] / (double)c[1] : 0.0;
}

/* TensorBoard logging never stops training: the first error is printed, later ones counted. */
static void tb_check(kiln_status st, int *errors) {
    if (st != KILN_OK && (*errors)++ == 0) fprintf(stderr, "\ntensorboard: %s (training goes on)\n", kiln_last_error());
}

/* Histograms of every parameter ("weights/0.weight") or, from g, of its gradient ("grads/...").
 * Each is computed on the parameter's device; nothing here waits. */
static void tb_histograms(kiln_summary_writer *tb, kiln_module *model, kiln_grads *g, int64_t step, int *errors) {
    kiln_param params[64];
    int n = kiln_module_params(model, params, 64);
    for (int i = 0; i < n && i < 64; i++) {
        if (params[i].buffer) continue;
        char tag[128];
        snprintf(tag, sizeof tag, "%s/%.96s", g ? "grads" : "weights", params[i].name);
        kiln_tensor t = g ? kiln_grad(g, *params[i].slot) : kiln_ref(*params[i].slot);
        if (t.id) tb_check(kiln_summary_writer_add_histogram(tb, tag, t, step), errors);
    }
}

int main(int argc, char **argv) {
    options o;
    int stop = parse(argc, argv, &o);
    if (stop >= 0) return stop;
    if (kiln_dist_init() != KILN_OK) {
        fprintf(stderr, "cannot join the MPI job: %s\n", kiln_last_error());
        return 1;
    }
    int rank = kiln_dist_rank(), world = kiln_dist_world_size();
    bool lead = rank == 0; /* prints progress and writes the checkpoint */
    kiln_dataset *train = open_split(o.data, true, o.limit), *test = open_split(o.data, false, o.limit);
    if (!train || !test) {
        fprintf(stderr, "cannot open Fashion-MNIST in %s: %s\n(install it: apt-get install dataset-fashion-mnist)\n", o.data,
                kiln_last_error());
        return 1;
    }
    kiln_module *model = build_model(o.model, o.seed);
    if (model && o.autocast && kiln_module_set_autocast(model, KILN_BF16) != KILN_OK) {
        fprintf(stderr, "cannot set autocast: %s\n", kiln_last_error());
        return 1;
    }
    if (model && o.device != KILN_CPU && kiln_module_to_device(model, o.device) != KILN_OK) {
        fprintf(stderr, "cannot move the model to %s: %s\n", kiln_device_name(o.device), kiln_last_error());
        return 1;
    }
    kiln_optimizer *opt = model ? kiln_adam_new(model, kiln_adam_defaults()) : NULL;
    if (world > 1 && o.device != KILN_CPU) {
        fprintf(stderr, "fashion_mnist: --device %s: collectives run on CPU tensors only (one rank)\n", kiln_device_name(o.device));
        return 2;
    }
    /* rank 0's weights everywhere; one process on a device needs none */
    kiln_ddp *ddp = model && o.device == KILN_CPU ? kiln_ddp_new(model, kiln_ddp_defaults()) : NULL;
    if (!model || !opt || (!ddp && o.device == KILN_CPU)) {
        fprintf(stderr, "cannot build the model: %s\n", kiln_last_error());
        return 1;
    }
    kiln_optimizer_set_lr(opt, o.lr);
    int64_t local_batch = (o.batch + world - 1) / world;
    kiln_loader_options lo = kiln_loader_defaults(local_batch);
    lo.workers = o.workers;
    lo.seed = o.seed;
    lo.shard_rank = rank;
    lo.shard_count = world;
    lo.device = o.device; /* batches reach the device on the loader's own streams */
    kiln_loader *train_loader = kiln_loader_new(train, lo);
    lo.shuffle = false;
    kiln_loader *test_loader = kiln_loader_new(test, lo);
    if (!train_loader || !test_loader) {
        fprintf(stderr, "cannot start the data loaders: %s\n", kiln_last_error());
        return 1;
    }
    int64_t batches = kiln_loader_batches(train_loader);
    if (o.limit > 0 && o.limit / o.batch < batches) batches = o.limit / o.batch > 0 ? o.limit / o.batch : 1;
    bool tty = isatty(STDOUT_FILENO);
    if (lead && world > 1)
        printf("kiln: %d ranks (MPI), each %lld samples of every batch of %lld, %d threads each\n", world,
               (long long)local_batch, (long long)(local_batch * world), kiln_num_threads());
    if (lead)
        printf("kiln: %s on Fashion-MNIST, %lld parameters, %d epochs of %lld batches of %lld, Adam lr %g (cosine), %d threads\n",
               o.model, (long long)kiln_module_num_parameters(model), o.epochs, (long long)batches,
               (long long)(local_batch * world), o.lr, kiln_num_threads());
    if (o.profile) kiln_profiler_start();
    const int64_t log_every = 50;
    kiln_cross_entropy_options ce = kiln_cross_entropy_defaults();
    kiln_metrics *metrics = kiln_metrics_new();
    int tb_errors = 0;
    kiln_summary_writer *tb = NULL; /* under MPI, rank 0's writes; the others' write nothing */
    if (o.logdir) {
        tb = kiln_summary_writer_open(o.logdir);
        if (!tb) fprintf(stderr, "tensorboard: %s (training goes on without it)\n", kiln_last_error());
        else if (lead) printf("kiln: TensorBoard events in %s\n", kiln_summary_writer_path(tb));
        char config[512];
        snprintf(config, sizeof config, "model %s, %d epochs, batch %lld, Adam lr %g (cosine), seed %llu, %d ranks",
                 o.model, o.epochs, (long long)(local_batch * world), o.lr, (unsigned long long)o.seed, world);
        if (tb) tb_check(kiln_summary_writer_add_text(tb, "config", config, 0), &tb_errors);
    }
    /* [fused]: the epochs' wall and CPU seconds and their count, by fusion's setting */
    double train_s[2] = {0, 0}, train_cpu_s[2] = {0, 0};
    int timed[2] = {0, 0};
    int64_t step = 0, total_steps = (int64_t)o.epochs * batches;
    int status = 0;
    for (int epoch = 1; epoch <= o.epochs && !status; epoch++) {
        /* U F F U: the first epoch's warm-up and any drift over the run fall on both sides */
        bool fused = o.fusion_ab ? (epoch - 1) % 4 == 1 || (epoch - 1) % 4 == 2 : kiln_fusion_enabled();
        if (o.fusion_ab) kiln_fusion_set_enabled(fused);
        double t0 = now_s(), t_step = t0, c0 = cpu_s();
        kiln_loader_start_epoch(train_loader, epoch);
        int64_t seen = 0;
        for (int64_t b = 1; b <= batches; b++) {
            kiln_tensor x, y;
            kiln_status st = kiln_loader_next(train_loader, &x, &y);
            if (st != KILN_OK) {
                if (st != KILN_DONE) fprintf(stderr, "\nloader: %s\n", kiln_last_error()), status = 1;
                break;
            }
            int64_t n = kiln_tensor_dim(y, 0);
            kiln_tensor logits = kiln_module_forward(model, x);
            kiln_tensor loss = kiln_cross_entropy(kiln_ref(logits), kiln_ref(y), ce);
            kiln_metrics_add(metrics, kiln_ref(loss), logits, y); /* accumulates on the device */
            kiln_grads *g = NULL;
            double lr = kiln_lr_cosine(o.lr, 0.0, step++, total_steps);
            kiln_optimizer_set_lr(opt, lr);
            if (tb) { /* the loss is still being computed: the writer reads it when it is ready */
                tb_check(kiln_summary_writer_add_scalar_tensor(tb, "train/loss", kiln_ref(loss), step), &tb_errors);
                tb_check(kiln_summary_writer_add_scalar(tb, "train/lr", lr, step), &tb_errors);
                double t = now_s();
                tb_check(kiln_summary_writer_add_scalar(tb, "time/step_ms", 1e3 * (t - t_step), step), &tb_errors);
                t_step = t;
            }
            kiln_status bst = kiln_backward(loss, &g);
            if (tb && bst == KILN_OK && b == batches) tb_histograms(tb, model, g, step, &tb_errors); /* before the update */
            if (bst != KILN_OK || kiln_optimizer_step(opt, g) != KILN_OK) {
                fprintf(stderr, "\ntraining step failed: %s\n", kiln_last_error());
                kiln_grads_free(g);
                status = 1;
                break;
            }
            kiln_grads_free(g);
            seen += n * world;
            if (b % log_every == 0 || b == batches) {
                double mean_loss, accuracy; /* one transaction: both metrics, one wait */
                if (kiln_metrics_read(metrics, &mean_loss, &accuracy, NULL) != KILN_OK) {
                    fprintf(stderr, "\n%s\n", kiln_last_error());
                    status = 1;
                    break;
                }
                if (tb) {
                    tb_check(kiln_summary_writer_add_scalar(tb, "train/mean_loss", mean_loss, step), &tb_errors);
                    tb_check(kiln_summary_writer_add_scalar(tb, "train/accuracy", accuracy, step), &tb_errors);
                }
                double dt = now_s() - t0;
                if (lead)
                    progress(tty, epoch, b, batches, mean_loss, accuracy, (double)seen / dt,
                             dt / (double)b * (double)(batches - b));
            }
        }
        if (kiln_sync() != KILN_OK) {
            fprintf(stderr, "\n%s\n", kiln_last_error());
            status = 1;
        }
        double epoch_s = now_s() - t0;
        train_s[fused] += epoch_s;
        train_cpu_s[fused] += cpu_s() - c0;
        timed[fused]++;
        int64_t tested = 0;
        double acc = status ? -1 : evaluate(model, test_loader, o.device, &tested);
        if (acc < 0) status = 1;
        if (tb && !status) {
            tb_check(kiln_summary_writer_add_scalar(tb, "test/accuracy", acc, step), &tb_errors);
            tb_check(kiln_summary_writer_add_scalar(tb, "time/epoch_s", epoch_s, step), &tb_errors);
            tb_histograms(tb, model, NULL, step, &tb_errors);
        }
        if (lead)
            printf("%sepoch %d%s: %.1f s (%.0f samples/s), test accuracy %.4f on %lld images\n", tty ? "\n" : "", epoch,
                   !o.fusion_ab ? "" : fused ? " (fused)" : " (unfused)", epoch_s, (double)seen / epoch_s, acc,
                   (long long)tested);
        fflush(stdout);
    }
    if (!status && o.bench && lead) {
        /* ms: the fused epochs under --fusion-ab (unfused_ms beside them), else every epoch */
        int main_n = o.fusion_ab ? timed[1] : timed[0] + timed[1];
        double main_s = o.fusion_ab ? train_s[1] : train_s[0] + train_s[1];
        double main_cpu = o.fusion_ab ? train_cpu_s[1] : train_cpu_s[0] + train_cpu_s[1];
        printf("{\"name\":\"fashion_mnist_%s%s_epoch\",\"side\":\"kiln\",\"ms\":%.1f,\"cpu_ms\":%.1f,", o.model,
               o.autocast ? "_autocast" : "", 1e3 * main_s / main_n, 1e3 * main_cpu / main_n);
        if (o.fusion_ab)
            printf("\"unfused_ms\":%.1f,\"unfused_cpu_ms\":%.1f,", 1e3 * train_s[0] / timed[0],
                   1e3 * train_cpu_s[0] / timed[0]);
        printf("\"rss_mib\":%.1f}\n", peak_rss_mib());
    } else if (!status && !o.bench) {
        if (lead) printf("mean epoch time %.1f s\n", (train_s[0] + train_s[1]) / o.epochs);
        if (kiln_dist_checkpoint_save(o.checkpoint, model, opt) == KILN_OK) { /* rank 0 writes */
            if (lead) printf("checkpoint written to %s\n", o.checkpoint);
        } else {
            fprintf(stderr, "checkpoint: %s\n", kiln_last_error()), status = 1;
        }
    }
    if (o.profile) { /* rank r > 0 writes FILE.r */
        kiln_profiler_stop();
        char path[4096];
        snprintf(path, sizeof path, lead ? "%s" : "%s.%d", o.profile, rank);
        if (kiln_profiler_write_trace(path) == KILN_OK && lead) printf("profile trace written to %s\n", o.profile);
        if (lead) kiln_profiler_write_summary(NULL);
    }
    if (tb) {
        tb_check(kiln_summary_writer_close(tb), &tb_errors); /* everything written, or why not */
        if (tb_errors > 1) fprintf(stderr, "tensorboard: %d logging errors in all\n", tb_errors);
        kiln_summary_writer_free(tb);
    }
    kiln_metrics_free(metrics);
    kiln_loader_free(train_loader);
    kiln_loader_free(test_loader);
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt);
    kiln_module_free(model);
    kiln_dataset_free(train);
    kiln_dataset_free(test);
    if (!status) kiln_dist_finalize(); /* after a failure, exiting without it makes mpirun end the job */
    return status;
}
