/* The optimizer step on gradients that arrive late (data parallelism's bucket all-reduces):
 * kiln_optimizer_step queues each parameter's update into copies as soon as it is called, so an
 * update runs once its own bucket is all-reduced, and commits the copies only when every
 * gradient succeeded. Checked here: the copies give bit-identical parameters to updating in
 * place, for every optimizer; a kernel that fails during such a step, or one bucket's
 * all-reduce that fails on one rank, leaves every parameter and the optimizer state (the
 * checkpoint's bytes) unchanged, on every rank, and training goes on after it; and with the
 * last bucket's all-reduce held back (a test hook), the first bucket's updates run before it
 * ends. Run alone (a world of one: the first two) and under `mpirun -np 2` / `-np 3`. */
#include <kiln.h>
#include <unistd.h>

#include "kiln_test.h"
#include "dist_util.h"
#include "autodiff/autodiff-impl.h"
#include "dist/dist-impl.h"
#include "engine/engine-impl.h"

static int rank, world;

enum { IN = 16, HID = 32, OUT = 4, BATCH = 6 };

static kiln_module *mlp(uint64_t seed) {
    kiln_module *layers[] = {kiln_linear_new(IN, HID, true, seed), kiln_relu_new(), kiln_linear_new(HID, OUT, true, seed + 1)};
    return kiln_sequential_new(3, layers);
}

/* Backward of a small loss on this rank's batch for step s (each rank its own rows). */
static kiln_grads *grads_of(kiln_module *m, int s) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, IN), 100 + (uint64_t)(s * 10 + rank));
    int64_t y[BATCH];
    for (int i = 0; i < BATCH; i++) y[i] = (i + s + rank) % OUT;
    kiln_tensor loss = kiln_cross_entropy(kiln_module_forward(m, x), kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(BATCH), y),
                                          kiln_cross_entropy_defaults());
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    return g;
}

enum { N_PARAMS = IN * HID + HID + HID * OUT + OUT };

static void read_params(kiln_module *m, float *out) { KT_CHECK(kt_read_params(m, out, N_PARAMS) == N_PARAMS); }

/* The checkpoint of model and optimizer (parameters, state, step counts) as bytes. */
static char *checkpoint_bytes(kiln_module *m, kiln_optimizer *opt, long *len) {
    char path[256];
    snprintf(path, sizeof path, "%s/kiln_test_dist_step_%d_%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), rank);
    KT_CHECK(kiln_checkpoint_save(path, m, opt) == KILN_OK);
    FILE *f = fopen(path, "rb");
    KT_CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)*len);
    KT_CHECK(buf && fread(buf, 1, (size_t)*len, f) == (size_t)*len);
    fclose(f);
    unlink(path);
    return buf;
}

typedef enum { SGD, ADAM, ADAMW, RMSPROP, ADAGRAD, N_KINDS } kind;

static kiln_optimizer *make_opt(kiln_module *m, kind k) {
    switch (k) {
    case SGD: return kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    case ADAM: return kiln_adam_new(m, kiln_adam_defaults());
    case ADAMW: return kiln_adam_new(m, kiln_adamw_defaults());
    case RMSPROP: {
        kiln_rmsprop_options o = kiln_rmsprop_defaults();
        o.momentum = 0.5, o.centered = true;
        return kiln_rmsprop_new(m, o);
    }
    default: return kiln_adagrad_new(m, kiln_adagrad_defaults());
    }
}

KT_TEST(early_step_same_as_in_place) {
    /* no data parallelism here: the same local gradients, marked late or not */
    for (int k = 0; k < N_KINDS; k++) {
        kiln_module *a = mlp(5), *b = mlp(5);
        kiln_optimizer *oa = make_opt(a, (kind)k), *ob = make_opt(b, (kind)k);
        for (int s = 0; s < 3; s++) {
            kiln_grads *ga = grads_of(a, s), *gb = grads_of(b, s);
            kiln__grads_mark_late(gb, NULL, NULL);
            KT_CHECK(kiln_optimizer_step(oa, ga) == KILN_OK);
            KT_CHECK(kiln_optimizer_step(ob, gb) == KILN_OK);
            kiln_grads_free(ga);
            kiln_grads_free(gb);
        }
        static float pa[N_PARAMS], pb[N_PARAMS];
        read_params(a, pa);
        read_params(b, pb);
        KT_CHECK_MSG(memcmp(pa, pb, sizeof pa) == 0, "optimizer %d: the early step's parameters differ", k);
        long la, lb;
        char *ca = checkpoint_bytes(a, oa, &la), *cb = checkpoint_bytes(b, ob, &lb);
        KT_CHECK_MSG(la == lb && memcmp(ca, cb, (size_t)la) == 0, "optimizer %d: the early step's state differs", k);
        free(ca), free(cb);
        kiln_optimizer_free(oa), kiln_optimizer_free(ob);
        kiln_module_free(a), kiln_module_free(b);
    }
}

/* One more step on every rank succeeds, and the ranks agree exactly (data parallelism). */
static void next_step_works(kiln_module *m, kiln_optimizer *opt) {
    kiln_grads *g = grads_of(m, 7);
    KT_CHECK_MSG(kiln_optimizer_step(opt, g) == KILN_OK, "the step after a failed one: %s", kiln_last_error());
    kiln_grads_free(g);
    static float p[N_PARAMS], all[3 * N_PARAMS];
    read_params(m, p);
    if (world > 3) return;
    KT_CHECK(kiln_into_data(kiln_dist_all_gather(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N_PARAMS), p)), all,
                            sizeof(float) * N_PARAMS * (size_t)world) == KILN_OK);
    for (int r = 0; r < world; r++) KT_CHECK(memcmp(all + r * N_PARAMS, p, sizeof p) == 0);
}

KT_TEST(failed_kernel_in_early_step_changes_nothing) {
    kiln_module *m = mlp(9);
    kiln_optimizer *opt = make_opt(m, ADAM);
    kiln_grads *g = grads_of(m, 0);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK); /* the state exists */
    kiln_grads_free(g);
    long before_len, after_len;
    char *before = checkpoint_bytes(m, opt, &before_len);
    g = grads_of(m, 1);
    kiln__grads_mark_late(g, NULL, NULL);
    KT_CHECK(kiln_sync() == KILN_OK);
    /* the first kernel the step runs fails: a copy or an update, of any parameter */
    kiln__debug_fail_next_kernel("kiln_optimizer_step");
    kiln_status st = kiln_optimizer_step(opt, g);
    kiln__debug_fail_next_kernel(NULL);
    KT_CHECK_MSG(st != KILN_OK && strstr(kiln_last_error(), "injected failure"), "%s", kiln_last_error());
    kiln_grads_free(g);
    kiln_sync(); /* (the failed kernel's error, already reported by the step) */
    char *after = checkpoint_bytes(m, opt, &after_len);
    KT_CHECK_MSG(before_len == after_len && memcmp(before, after, (size_t)before_len) == 0,
                 "a failed step changed the parameters or the optimizer state");
    free(before), free(after);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

static kiln_ddp *two_buckets(kiln_module *m) {
    /* last registered first: fc2's bias and weight and fc1's bias (656 bytes), then fc1's weight */
    kiln_ddp_options o = kiln_ddp_defaults();
    o.bucket_bytes = 1024;
    kiln_ddp *ddp = kiln_ddp_new(m, o);
    KT_CHECK(ddp && kiln_ddp_num_buckets(ddp) == 2);
    return ddp;
}

/* A data-parallel step in which rank 1 alone fails (inject runs there, before the step's backward):
 * it must fail on every rank, rank 1 naming `own` and the others "rank 1 failed", and leave
 * every rank's parameters and optimizer state (the checkpoint's bytes) as they were; the next
 * step then works and the ranks agree. */
static void step_failing_on_rank_1(uint64_t seed, void (*inject)(void), const char *own) {
    kiln_module *m = mlp(seed + (uint64_t)rank);
    kiln_ddp *ddp = two_buckets(m);
    kiln_optimizer *opt = make_opt(m, ADAM);
    kiln_grads *g = grads_of(m, 0);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    long before_len, after_len;
    char *before = checkpoint_bytes(m, opt, &before_len);
    if (rank == 1) inject(); /* (before backward: its buckets' all-reduces may run at once) */
    g = grads_of(m, 1);
    kiln_status st = kiln_optimizer_step(opt, g);
    kiln__debug_fail_next_kernel(NULL);
    KT_CHECK_MSG(st != KILN_OK, "rank %d: the step succeeded", rank);
    const char *want = rank == 1 ? own : "rank 1 failed";
    KT_CHECK_MSG(strstr(kiln_last_error(), want), "rank %d: '%s' without '%s'", rank, kiln_last_error(), want);
    kiln_grads_free(g);
    kiln_sync(); /* (the failure's error, already reported by the step) */
    char *after = checkpoint_bytes(m, opt, &after_len);
    KT_CHECK_MSG(before_len == after_len && memcmp(before, after, (size_t)before_len) == 0,
                 "rank %d: a failure on rank 1 changed the parameters or the optimizer state", rank);
    free(before), free(after);
    next_step_works(m, opt);
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

/* rank 1's second collective from here (the step's second bucket) fails; the first one, the
 * other bucket, succeeds everywhere */
static void fail_second_bucket(void) { kiln__dist_debug_fail(1); }

KT_TEST(failed_bucket_changes_nothing_on_any_rank) {
    if (world == 1) return; /* (no all-reduce to fail: the test above covers a world of one) */
    step_failing_on_rank_1(11, fail_second_bucket, "injected failure");
}

/* every bucket succeeds; then a kernel of rank 1's tentative updates fails */
static void fail_first_update(void) { kiln__debug_fail_next_kernel("kiln_optimizer_step"); }

/* A failure on one rank alone, after every bucket's all-reduce succeeded: the ranks agree
 * before committing, so none commits (rank 1's error names the step's injected failure). */
KT_TEST(failure_on_one_rank_alone_changes_nothing_on_any_rank) {
    if (world == 1) return; /* (the failed-kernel test above covers a world of one) */
    step_failing_on_rank_1(13, fail_first_update, "kiln_optimizer_step");
}

KT_TEST(first_bucket_updates_before_last_all_reduce_ends) {
    if (world == 1) return; /* (a world of one has no all-reduce) */
    kiln_module *m = mlp(21);
    kiln_ddp *ddp = two_buckets(m);
    kiln_optimizer *opt = make_opt(m, SGD);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_profiler_start();
    kiln__dist_debug_delay(1, 300); /* the step's second all-reduce waits 300 ms first */
    kiln_grads *g = grads_of(m, 0);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    kiln_profiler_stop();
    static kiln_profile_event ev[4096];
    size_t n = kiln_profiler_events(ev, 4096);
    /* the buckets' two all-reduces, then the step's agreement before it commits (the last) */
    double reduce_start[3] = {0}, reduce_end[3] = {0}, first_update = -1;
    int reduces = 0, updates = 0;
    for (size_t i = 0; i < n && i < 4096; i++) {
        if (strcmp(ev[i].kernel, "ALL_REDUCE") == 0 && reduces < 3) {
            int k = reduces++;
            for (; k > 0 && reduce_start[k - 1] > ev[i].start_us; k--)
                reduce_start[k] = reduce_start[k - 1], reduce_end[k] = reduce_end[k - 1];
            reduce_start[k] = ev[i].start_us, reduce_end[k] = ev[i].end_us;
        }
        if (strcmp(ev[i].kernel, "SGD_UPDATE") == 0) {
            updates++;
            if (first_update < 0 || ev[i].start_us < first_update) first_update = ev[i].start_us;
        }
    }
    KT_CHECK_MSG(reduces == 3 && updates == 4, "%d all-reduces, %d updates", reduces, updates);
    double last_reduce_end = fmax(reduce_end[0], reduce_end[1]);
    /* (KILN_SYNC=1 runs every op at dispatch, in order: the all-reduces during backward) */
    KT_CHECK_MSG(!kiln_engine_is_async() || first_update < last_reduce_end,
                 "rank %d: the first update started at %.0f us, after the last all-reduce ended (%.0f us)", rank,
                 first_update, last_reduce_end);
    next_step_works(m, opt);
    kiln_ddp_free(ddp);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
}

int main(void) {
    if (!kt_dist_begin(&rank, &world)) return 1;
    KT_RUN(early_step_same_as_in_place);
    KT_RUN(failed_kernel_in_early_step_changes_nothing);
    KT_RUN(failed_bucket_changes_nothing_on_any_rank);
    KT_RUN(failure_on_one_rank_alone_changes_nothing_on_any_rank);
    KT_RUN(first_bucket_updates_before_last_all_reduce_ends);
    return kt_dist_end();
}
