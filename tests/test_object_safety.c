/* Every object a user frees carries a tensor handle's guarantee: a use after free and a double
 * free are errors (a status, and kiln_last_error naming the public call and its line, the
 * object's kind, and the file:line of the free), never undefined behaviour. Modules, optimizers,
 * gradient sets, datasets, loaders, generators, metrics, summary writers, tokenizers and
 * transactions, each made,
 * freed, then used and freed again; also a child module freed with its parent, a pointer of the
 * wrong kind, and a loop that frees many objects (the registry's memory stays bounded). Runs
 * under AddressSanitizer in CI: a stray read of freed memory fails there. */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_test.h"

/* The last error: status st, naming the call op (at this file's use_line unless 0: a call
 * that records no call site of its own) and "freed by <freed_by> at ...test_object_safety.c:
 * <free_line>". */
static void expect_freed(int here, kiln_status st, const char *op, int use_line, const char *kind, const char *freed_by,
                         int free_line) {
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(kiln_last_status() == st, "line %d: status %s, expected %s (%s)", here,
                 kiln_status_str(kiln_last_status()), kiln_status_str(st), msg);
    char want[160];
    KT_CHECK_MSG(strncmp(msg, op, strlen(op)) == 0, "line %d: '%s' does not start with %s", here, msg, op);
    snprintf(want, sizeof want, "test_object_safety.c:%d: this %s", use_line, kind);
    KT_CHECK_MSG(use_line == 0 || strstr(msg, want) != NULL, "line %d: '%s' lacks '%s'", here, msg, want);
    snprintf(want, sizeof want, "this %s was freed by %s at ", kind, freed_by);
    KT_CHECK_MSG(strstr(msg, want) != NULL, "line %d: '%s' lacks '%s'", here, msg, want);
    snprintf(want, sizeof want, "test_object_safety.c:%d (", free_line);
    KT_CHECK_MSG(strstr(msg, want) != NULL, "line %d: '%s' lacks '%s'", here, msg, want);
}
#define EXPECT_FREED(st, op, use_line, kind, freed_by, free_line) \
    expect_freed(__LINE__, (st), (op), (use_line), (kind), (freed_by), (free_line))

/* A poisoned result: its read fails with st and names op and the freed object. */
static void expect_poisoned(int here, kiln_tensor t, const char *op, const char *kind) {
    float v[64];
    kiln_status st = kiln_into_data(t, v, sizeof v);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(st == KILN_ERR_STALE_HANDLE, "line %d: read gave %s (%s)", here, kiln_status_str(st), msg);
    KT_CHECK_MSG(strstr(msg, op) && strstr(msg, kind) && strstr(msg, "freed by"), "line %d: '%s'", here, msg);
}

KT_TEST(module_use_after_free_and_double_free) {
    kiln_module *m = kiln_linear_new(4, 3, true, 1);
    KT_CHECK(m != NULL);
    int freed_at = __LINE__ + 1;
    kiln_module_free(m);
    kiln_tensor y = kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4))); int line = __LINE__;
    (void)line;
    expect_poisoned(__LINE__, y, "kiln_module_forward", "kiln_module");
    KT_CHECK(kiln_module_params(m, NULL, 0) == 0); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_module_params", 0, "kiln_module", "kiln_module_free", freed_at);
    KT_CHECK(kiln_module_to_device(m, KILN_CPU) == KILN_ERR_STALE_HANDLE); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_module_to_device", 0, "kiln_module", "kiln_module_free", freed_at);
    kiln_module_train(m, false); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_module_train", 0, "kiln_module", "kiln_module_free", freed_at);
    KT_CHECK(kiln_module_child(m, "x") == NULL);
    KT_CHECK(kiln_module_add_parameter(m, "w2", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2))) == KILN_ERR_STALE_HANDLE);
    kiln_tensor p = kiln_module_param(m, "weight"); line = __LINE__;
    expect_poisoned(__LINE__, p, "kiln_module_param", "kiln_module");
    kiln_module_free(m); line = __LINE__; /* a double free */
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_module_free", line, "kiln_module", "kiln_module_free", freed_at);
    KT_CHECK(strstr(kiln_last_error(), "double free") != NULL);
}

KT_TEST(child_freed_with_its_parent) {
    kiln_module *child = kiln_linear_new(4, 4, false, 2);
    kiln_module *seq = kiln_sequential_new(1, (kiln_module *[]){child});
    KT_CHECK(seq != NULL);
    KT_CHECK(kiln_module_child(seq, "0") == child);
    int freed_at = __LINE__ + 1;
    kiln_module_free(seq);
    kiln_tensor y = kiln_module_forward(child, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4)));
    expect_poisoned(__LINE__, y, "kiln_module_forward", "kiln_module");
    KT_CHECK(kiln_module_num_parameters(child) == -1);
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_module_num_parameters", 0, "kiln_module", "kiln_module_free", freed_at);
}

KT_TEST(optimizer_and_grads) {
    kiln_module *m = kiln_linear_new(3, 1, true, 3);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    KT_CHECK(opt != NULL);
    kiln_tensor loss = kiln_sum(kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3))));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    int grads_freed = __LINE__ + 1;
    kiln_grads_free(g);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_ERR_STALE_HANDLE); int line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_optimizer_step", line, "kiln_grads", "kiln_grads_free", grads_freed);
    kiln_tensor w = kiln_module_param(m, "weight");
    KT_CHECK(kiln_grad(g, w).id == 0); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_grad", line, "kiln_grads", "kiln_grads_free", grads_freed);
    KT_CHECK(kiln_grads_count(g) == 0);
    kiln_grads_free(g); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_grads_free", line, "kiln_grads", "kiln_grads_free", grads_freed);
    kiln_release(w);

    int opt_freed = __LINE__ + 1;
    kiln_optimizer_free(opt);
    kiln_optimizer_set_lr(opt, 0.5); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_optimizer_set_lr", 0, "kiln_optimizer", "kiln_optimizer_free", opt_freed);
    KT_CHECK(kiln_optimizer_steps(opt) == -1);
    KT_CHECK(kiln_optimizer_set_group_lr(opt, 0, 0.1) == KILN_ERR_STALE_HANDLE);
    loss = kiln_sum(kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3))));
    KT_CHECK(kiln_train_step(opt, loss, NULL) == KILN_ERR_STALE_HANDLE); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_train_step", 0, "kiln_optimizer", "kiln_optimizer_free", opt_freed);
    KT_CHECK(kiln_checkpoint_save("/nonexistent/x.safetensors", m, opt) == KILN_ERR_STALE_HANDLE);
    kiln_optimizer_free(opt); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_optimizer_free", line, "kiln_optimizer", "kiln_optimizer_free", opt_freed);
    /* a module freed before its optimizer is made from it */
    int m_freed = __LINE__ + 1;
    kiln_module_free(m);
    KT_CHECK(kiln_sgd_new(m, kiln_sgd_defaults()) == NULL); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_sgd_new", 0, "kiln_module", "kiln_module_free", m_freed);
}

KT_TEST(wrong_kind) {
    kiln_metrics *metrics = kiln_metrics_new();
    kiln_tensor y = kiln_module_forward((kiln_module *)(void *)metrics, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1)));
    float v;
    KT_CHECK(kiln_into_scalar(y, &v) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "passed as a kiln_module is a kiln_metrics") != NULL);
    kiln_metrics_free(metrics);
}

static int64_t three(void *ctx) {
    (void)ctx;
    return 3;
}

static kiln_status sample(void *ctx, int64_t i, void *input, void *target, uint64_t seed) {
    (void)ctx, (void)seed;
    *(float *)input = (float)i;
    *(int64_t *)target = i;
    return KILN_OK;
}

KT_TEST(dataset_and_loader) {
    kiln_dataset_desc d = {.length = three, .get = sample, .input_dtype = KILN_F32, .input_shape = KILN_SHAPE(1),
                           .target_dtype = KILN_I64, .target_shape = {.ndim = 0}};
    kiln_dataset *ds = kiln_dataset_new(d, NULL);
    KT_CHECK(ds != NULL);
    kiln_loader_options o = kiln_loader_defaults(2);
    kiln_loader *l = kiln_loader_new(ds, o);
    KT_CHECK(l != NULL);
    kiln_tensor x, t;
    KT_CHECK(kiln_loader_next(l, &x, &t) == KILN_OK);
    kiln_release(x), kiln_release(t);
    int l_freed = __LINE__ + 1;
    kiln_loader_free(l);
    KT_CHECK(kiln_loader_next(l, &x, &t) == KILN_ERR_STALE_HANDLE); int line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_loader_next", line, "kiln_loader", "kiln_loader_free", l_freed);
    KT_CHECK(kiln_loader_start_epoch(l, 1) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(kiln_loader_batches(l) == -1);
    kiln_loader_free(l); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_loader_free", line, "kiln_loader", "kiln_loader_free", l_freed);

    int ds_freed = __LINE__ + 1;
    kiln_dataset_free(ds);
    KT_CHECK(kiln_dataset_length(ds) == -1);
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_dataset_length", 0, "kiln_dataset", "kiln_dataset_free", ds_freed);
    KT_CHECK(kiln_dataset_get(ds, 0, &x, &t) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(kiln_loader_new(ds, o) == NULL); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_loader_new", line, "kiln_dataset", "kiln_dataset_free", ds_freed);
    KT_CHECK(kiln_transform_random_hflip(ds, 0.5) == NULL);
    kiln_dataset_free(ds); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_dataset_free", line, "kiln_dataset", "kiln_dataset_free", ds_freed);
}

KT_TEST(generator) {
    kiln_generator *g = kiln_generator_new(7);
    int freed_at = __LINE__ + 1;
    kiln_generator_free(g);
    expect_poisoned(__LINE__, kiln_randn_gen(g, KILN_CPU, KILN_F32, KILN_SHAPE(3)), "kiln_randn_gen", "kiln_generator");
    expect_poisoned(__LINE__, kiln_dropout_gen(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), 0.5, g), "kiln_dropout_gen",
                    "kiln_generator");
    kiln_generator_manual_seed(g, 1);
    int line = 0;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_generator_manual_seed", 0, "kiln_generator", "kiln_generator_free", freed_at);
    kiln_generator_free(g); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_generator_free", line, "kiln_generator", "kiln_generator_free", freed_at);
    /* NULL is still the global generator */
    kiln_tensor r = kiln_rand_gen(NULL, KILN_CPU, KILN_F32, KILN_SHAPE(2));
    float v[2];
    KT_CHECK(kiln_into_data(r, v, sizeof v) == KILN_OK);
}

KT_TEST(metrics) {
    kiln_metrics *m = kiln_metrics_new();
    int freed_at = __LINE__ + 1;
    kiln_metrics_free(m);
    double loss, acc;
    int64_t n;
    KT_CHECK(kiln_metrics_read(m, &loss, &acc, &n) == KILN_ERR_STALE_HANDLE); int line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_metrics_read", line, "kiln_metrics", "kiln_metrics_free", freed_at);
    KT_CHECK(kiln_metrics_add(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1)), KILN_NONE,
                              kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2))) == KILN_ERR_STALE_HANDLE);
    kiln_metrics_free(m); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_metrics_free", line, "kiln_metrics", "kiln_metrics_free", freed_at);
}

KT_TEST(summary_writer) {
    char dir[] = "/tmp/kiln_summary_XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL);
    kiln_summary_writer *w = kiln_summary_writer_open(dir);
    KT_CHECK(w != NULL);
    KT_CHECK(kiln_summary_writer_add_scalar(w, "loss", 1.0, 0) == KILN_OK);
    char file[512];
    snprintf(file, sizeof file, "%s", kiln_summary_writer_path(w));
    int freed_at = __LINE__ + 1;
    kiln_summary_writer_free(w);
    KT_CHECK(kiln_summary_writer_add_scalar(w, "loss", 2.0, 1) == KILN_ERR_STALE_HANDLE); int line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_summary_writer_add_scalar", line, "kiln_summary_writer",
                 "kiln_summary_writer_free", freed_at);
    KT_CHECK(kiln_summary_writer_add_histogram(w, "w", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), 1) ==
             KILN_ERR_STALE_HANDLE); /* (the tensor is released: the leak check sees it) */
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_ERR_STALE_HANDLE); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_summary_writer_flush", line, "kiln_summary_writer",
                 "kiln_summary_writer_free", freed_at);
    KT_CHECK(kiln_summary_writer_close(w) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(kiln_summary_writer_path(w) == NULL);
    kiln_summary_writer_free(w); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_summary_writer_free", line, "kiln_summary_writer",
                 "kiln_summary_writer_free", freed_at);
    unlink(file);
    rmdir(dir);
}

KT_TEST(tokenizer) {
    char path[] = "/tmp/kiln_vocab_XXXXXX";
    int fd = mkstemp(path);
    KT_CHECK(fd >= 0);
    if (fd < 0) return;
    const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n";
    KT_CHECK(write(fd, vocab, sizeof vocab - 1) == (ssize_t)(sizeof vocab - 1));
    close(fd);
    kiln_tokenizer *tok = kiln_tokenizer_load(path, kiln_tokenizer_defaults());
    unlink(path);
    if (!tok) { /* built without utf8proc */
        KT_CHECK(kiln_last_status() == KILN_ERR_UNSUPPORTED);
        return;
    }
    KT_CHECK(kiln_tokenizer_vocab_size(tok) == 7);
    int freed_at = __LINE__ + 1;
    kiln_tokenizer_free(tok);
    KT_CHECK(kiln_tokenizer_vocab_size(tok) == -1);
    int line = 0;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_tokenizer_vocab_size", 0, "kiln_tokenizer", "kiln_tokenizer_free", freed_at);
    int32_t ids[8];
    int32_t n = 0;
    KT_CHECK(kiln_tokenizer_encode(tok, "hello", 5, ids, 8, &n) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(kiln_tokenizer_token(tok, 0) == NULL);
    kiln_tokenizer_free(tok); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_tokenizer_free", line, "kiln_tokenizer", "kiln_tokenizer_free", freed_at);
}

KT_TEST(transaction) {
    kiln_transaction *tx = kiln_transaction_new();
    int freed_at = __LINE__ + 1;
    kiln_transaction_free(tx);
    float v;
    KT_CHECK(kiln_transaction_read(tx, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1)), &v, sizeof v) == KILN_ERR_STALE_HANDLE);
    int line = __LINE__ - 1;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_transaction_read", line, "kiln_transaction", "kiln_transaction_free", freed_at);
    KT_CHECK(kiln_transaction_execute(tx) == KILN_ERR_STALE_HANDLE);
    kiln_transaction_free(tx); line = __LINE__;
    EXPECT_FREED(KILN_ERR_STALE_HANDLE, "kiln_transaction_free", line, "kiln_transaction", "kiln_transaction_free", freed_at);
}

/* Objects made and freed in a loop: each freed struct waits in a bounded ring before its
 * memory goes back, and a stale pointer from far back is still refused (not live). */
KT_TEST(many_frees_stay_bounded) {
    kiln_transaction *first = kiln_transaction_new();
    kiln_transaction_free(first);
    for (int i = 0; i < 5000; i++) kiln_transaction_free(kiln_transaction_new());
    kiln_status st = kiln_transaction_execute(first);
    KT_CHECK(st == KILN_ERR_STALE_HANDLE);
}

int main(void) {
    KT_RUN(module_use_after_free_and_double_free);
    KT_RUN(child_freed_with_its_parent);
    KT_RUN(optimizer_and_grads);
    KT_RUN(wrong_kind);
    KT_RUN(dataset_and_loader);
    KT_RUN(generator);
    KT_RUN(metrics);
    KT_RUN(summary_writer);
    KT_RUN(tokenizer);
    KT_RUN(transaction);
    KT_RUN(many_frees_stay_bounded);
    return kt_finish();
}
