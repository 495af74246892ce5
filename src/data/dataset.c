/* Datasets: the wrapper around a user's get(), inspection of one sample, in-memory data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data-impl.h"
#include "kiln/tensor.h"

static bool shape_ok(kiln_shape s, int64_t *numel) {
    if (s.ndim < 0 || s.ndim > KILN_MAX_DIMS) return false;
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) {
        if (s.dims[d] < 0 || (s.dims[d] && n > (INT64_MAX >> 4) / s.dims[d])) return false;
        n *= s.dims[d];
    }
    *numel = n;
    return true;
}

kiln_dataset *kiln__dataset_make(const char *op, kiln_dataset_desc desc, void *ctx) {
    kiln_status st = KILN_OK;
    const char *why = NULL;
    int64_t in_n = 0, tg_n = 0;
    if (!desc.length || !desc.get)
        st = KILN_ERR_NULL, why = "the descriptor needs length() and get()";
    else if (!kiln__dtype_valid(desc.input_dtype) || !kiln__dtype_valid(desc.target_dtype))
        st = KILN_ERR_DTYPE, why = "invalid input or target dtype";
    else if (!shape_ok(desc.input_shape, &in_n) || !shape_ok(desc.target_shape, &tg_n))
        st = KILN_ERR_SHAPE, why = "invalid input or target shape (0..8 dims, sizes >= 0)";
    kiln_dataset *ds = st == KILN_OK ? calloc(1, sizeof *ds) : NULL;
    if (ds && !kiln__object_register(ds, KILN__DATASET_KIND)) free(ds), ds = NULL;
    if (st == KILN_OK && !ds) st = KILN_ERR_OUT_OF_MEMORY, why = "cannot allocate the dataset";
    if (st != KILN_OK) {
        if (desc.free) desc.free(ctx);
        kiln__report(st, op, "%s", why);
        return NULL;
    }
    ds->desc = desc;
    ds->ctx = ctx;
    ds->input_numel = in_n;
    ds->target_numel = tg_n;
    ds->input_bytes = (size_t)in_n * kiln__elsize(desc.input_dtype);
    ds->target_bytes = (size_t)tg_n * kiln__elsize(desc.target_dtype);
    return ds;
}

kiln_dataset *kiln_dataset_new(kiln_dataset_desc desc, void *ctx) {
    return kiln__dataset_make("kiln_dataset_new", desc, ctx);
}

int64_t kiln_dataset_length(const kiln_dataset *ds) {
    if (ds) KILN__OBJECT_OR_RETURN(ds, KILN__DATASET_KIND, "kiln_dataset_length", -1);
    return ds ? ds->desc.length(ds->ctx) : -1;
}

void kiln_dataset_free(kiln_dataset *ds) {
    if (!ds || kiln__object_retire(ds, KILN__DATASET_KIND, "kiln_dataset_free") != KILN_OK) return;
    if (ds->desc.free) ds->desc.free(ds->ctx);
    kiln__object_dispose(ds, KILN__DATASET_KIND, "kiln_dataset_free");
}

kiln_status kiln_dataset_get(kiln_dataset *ds, int64_t index, kiln_tensor *input, kiln_tensor *target) {
    static const char op[] = "kiln_dataset_get";
    if (input) *input = KILN_NONE;
    if (target) *target = KILN_NONE;
    if (!ds || !input || !target) return kiln__report(KILN_ERR_NULL, op, "dataset or output pointer is NULL");
    KILN__OBJECT_OR_RETURN(ds, KILN__DATASET_KIND, op, kiln_last_status());
    int64_t n = ds->desc.length(ds->ctx);
    if (index < 0 || index >= n)
        return kiln__report(KILN_ERR_INDEX, op, "index %lld out of range for %lld samples", (long long)index,
                            (long long)n);
    size_t at = (ds->input_bytes + 63) & ~(size_t)63; /* the target aligned for its dtype */
    unsigned char *buf = malloc(at + ds->target_bytes + 1);
    if (!buf) return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate a sample buffer");
    kiln_status st = kiln__fetch_checked(ds, index, buf, buf + at, kiln__sample_seed(0, 0, index));
    if (st != KILN_OK) {
        char why[KILN__DATA_MSG];
        kiln__fetch_error(why, sizeof why);
        free(buf);
        return kiln__report(st, op, "sample %lld: %s", (long long)index, why);
    }
    kiln_tensor x = kiln_from_data(KILN_CPU, ds->desc.input_dtype, ds->desc.input_shape, buf);
    kiln_tensor y = kiln_from_data(KILN_CPU, ds->desc.target_dtype, ds->desc.target_shape, buf + at);
    free(buf);
    st = kiln_tensor_status(x);
    if (st == KILN_OK) st = kiln_tensor_status(y);
    if (st != KILN_OK) {
        kiln_release(x);
        kiln_release(y);
        return kiln__report(st, op, "cannot make the sample's tensors: %s", kiln_status_str(st));
    }
    *input = x;
    *target = y;
    return KILN_OK;
}

kiln_status kiln__fetch_checked(const kiln_dataset *ds, int64_t index, void *input, void *target, uint64_t seed) {
    kiln_clear_error();
    /* get()'s own messages would otherwise carry the location of whatever kiln call came last */
    kiln__site site = kiln__call_site();
    kiln_set_call_site(NULL, 0);
    kiln_status st = ds->desc.get(ds->ctx, index, input, target, seed);
    if (st != KILN_OK && kiln_last_status() == KILN_OK) kiln__report(st, "get", "returned %s", kiln_status_str(st));
    kiln_set_call_site(site.file, site.line);
    if (st == KILN_OK) return KILN_OK;
    return st < 0 ? st : KILN_ERR_INTERNAL; /* KILN_DONE is no answer for a sample in range */
}

void kiln__fetch_error(char *buf, size_t size) { snprintf(buf, size, "%s", kiln_last_error()); }

/* ---- Fisher-Yates over a counter-based generator ------------------------------------------ */

void kiln__shuffle_order(int64_t *order, int64_t n, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    uint64_t key = kiln__hash3(seed ^ 0x5348554646ull /* "SHUFF" */, (uint64_t)epoch, 0);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)kiln__below(kiln__mix64(key ^ (uint64_t)i), (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* ---- in-memory dataset ------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    size_t in_bytes, tg_bytes;
    unsigned char *inputs, *targets;
} memory_ctx;

static int64_t memory_length(void *ctx) { return ((memory_ctx *)ctx)->n; }

static kiln_status memory_get(void *ctx, int64_t index, void *input, void *target, uint64_t seed) {
    memory_ctx *m = ctx; /* index in range: kiln_dataset_get and the loader checked it */
    memcpy(input, m->inputs + (size_t)index * m->in_bytes, m->in_bytes);
    memcpy(target, m->targets + (size_t)index * m->tg_bytes, m->tg_bytes);
    return KILN_OK;
}

static void memory_free(void *ctx) {
    memory_ctx *m = ctx;
    if (!m) return;
    free(m->inputs);
    free(m->targets);
    free(m);
}

/* Copies t (consumed) to a fresh host buffer of its dense bytes; NULL + *st on failure. */
static unsigned char *host_copy(kiln_tensor t, size_t bytes, const char *what, kiln_status *st) {
    static const char op[] = "kiln_memory_dataset_new";
    unsigned char *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        kiln_release(t);
        *st = kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate %zu bytes for the %s", bytes, what);
        return NULL;
    }
    *st = kiln_into_data(t, buf, bytes);
    if (*st != KILN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", kiln_last_error());
        free(buf);
        kiln__report(*st, op, "%s: %s", what, why);
        return NULL;
    }
    return buf;
}

kiln_dataset *kiln_memory_dataset_new(kiln_tensor inputs, kiln_tensor targets) {
    static const char op[] = "kiln_memory_dataset_new";
    kiln_shape si = kiln_tensor_shape(inputs), sg = kiln_tensor_shape(targets);
    /* a stale or poisoned argument is left to the reads below, which report its own error */
    bool usable = si.ndim >= 0 && sg.ndim >= 0 && kiln_tensor_status(inputs) == KILN_OK &&
                  kiln_tensor_status(targets) == KILN_OK;
    const char *why = NULL;
    if (usable && (si.ndim < 1 || sg.ndim < 1))
        why = "inputs and targets need a leading sample dim";
    else if (usable && si.dims[0] != sg.dims[0])
        why = "inputs and targets have different sample counts";
    if (why) {
        kiln_release(inputs);
        kiln_release(targets);
        char a[128], b[128];
        snprintf(a, sizeof a, "[%d dims, %lld]", si.ndim, (long long)(si.ndim > 0 ? si.dims[0] : 0));
        snprintf(b, sizeof b, "[%d dims, %lld]", sg.ndim, (long long)(sg.ndim > 0 ? sg.dims[0] : 0));
        kiln__report(KILN_ERR_SHAPE, op, "%s (inputs %s, targets %s)", why, a, b);
        return NULL;
    }
    size_t in_total = si.ndim >= 0 ? (size_t)kiln_shape_numel(si) * kiln_dtype_size(kiln_tensor_dtype(inputs)) : 0;
    size_t tg_total = sg.ndim >= 0 ? (size_t)kiln_shape_numel(sg) * kiln_dtype_size(kiln_tensor_dtype(targets)) : 0;
    kiln_dtype di = kiln_tensor_dtype(inputs), dg = kiln_tensor_dtype(targets);
    kiln_status st;
    unsigned char *in_buf = host_copy(inputs, in_total, "inputs", &st);
    if (!in_buf) {
        kiln_release(targets);
        return NULL;
    }
    unsigned char *tg_buf = host_copy(targets, tg_total, "targets", &st);
    memory_ctx *m = tg_buf ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        if (tg_buf) kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the dataset");
        free(in_buf);
        free(tg_buf);
        return NULL;
    }
    m->n = si.dims[0];
    m->inputs = in_buf;
    m->targets = tg_buf;
    kiln_dataset_desc d = {.input_dtype = di, .target_dtype = dg, .length = memory_length, .get = memory_get,
                           .free = memory_free};
    d.input_shape.ndim = si.ndim - 1;
    d.target_shape.ndim = sg.ndim - 1;
    memcpy(d.input_shape.dims, si.dims + 1, sizeof(int64_t) * (size_t)(si.ndim - 1));
    memcpy(d.target_shape.dims, sg.dims + 1, sizeof(int64_t) * (size_t)(sg.ndim - 1));
    kiln_dataset *ds = kiln__dataset_make(op, d, m);
    if (ds) {
        m->in_bytes = ds->input_bytes;
        m->tg_bytes = ds->target_bytes;
    }
    return ds;
}
