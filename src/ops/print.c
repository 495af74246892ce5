/* kiln_to_string and kiln_print: a tensor as PyTorch's repr lays it out with its default print
 * options (line width 80, 4 decimals, summaries past 1000 elements keeping 3 per edge), over a
 * dense host copy taken through the read path. Neither call consumes its handle. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "kiln/tensor.h"
#include "ops/ops-impl.h"

enum { LINE_WIDTH = 80, EDGE_ITEMS = 3, SUMMARY_THRESHOLD = 1000, ELEM_MAX = 48 };

typedef kiln__text text; /* core/text.h */

static void put_n(text *o, const char *s, size_t n) { kiln__text_put(o, s, n); }

static void put(text *o, const char *s) { put_n(o, s, strlen(s)); }

static void pad(text *o, int n) {
    for (; n > 0; n--) put_n(o, " ", 1);
}

/* The data and how its elements are written: the fields after `summarize` follow PyTorch's
 * _Formatter, chosen from the elements that are shown. */
typedef struct {
    const unsigned char *raw;
    kiln_dtype dtype;
    int ndim;
    const int64_t *shape;
    int64_t stride[KILN_MAX_DIMS];
    bool summarize;
    bool is_float, int_mode, sci_mode;
    int width;
    bool any_finite;
    double abs_min, abs_max;
} layout;

static int elem_str(const layout *l, int64_t i, char out[ELEM_MAX]) {
    if (l->dtype == KILN_I64) {
        int64_t v;
        memcpy(&v, l->raw + i * 8, sizeof v);
        return snprintf(out, ELEM_MAX, "%" PRId64, v);
    }
    double v = kiln__load_as_f64(l->raw, l->dtype, i);
    if (l->dtype == KILN_BOOL) return snprintf(out, ELEM_MAX, "%s", v != 0 ? "True" : "False");
    if (!l->is_float) return snprintf(out, ELEM_MAX, "%.0f", v);
    if (isnan(v)) return snprintf(out, ELEM_MAX, "nan");
    if (isinf(v)) return snprintf(out, ELEM_MAX, "%s", v > 0 ? "inf" : "-inf");
    if (l->sci_mode) return snprintf(out, ELEM_MAX, "%.4e", v);
    if (l->int_mode) return snprintf(out, ELEM_MAX, "%.0f.", v);
    return snprintf(out, ELEM_MAX, "%.4f", v);
}

static bool cut_at(const layout *l, int dim, int64_t i) {
    return l->summarize && l->shape[dim] > 2 * EDGE_ITEMS && i == EDGE_ITEMS;
}

/* Calls fn on the flat index of every element shown (all of them unless summarised). */
static void each_shown(layout *l, int dim, int64_t base, void (*fn)(layout *, int64_t)) {
    if (dim == l->ndim) {
        fn(l, base);
        return;
    }
    for (int64_t i = 0; i < l->shape[dim]; i++) {
        if (cut_at(l, dim, i)) i = l->shape[dim] - EDGE_ITEMS;
        each_shown(l, dim + 1, base + i * l->stride[dim], fn);
    }
}

static void scan_range(layout *l, int64_t i) {
    double v = kiln__load_as_f64(l->raw, l->dtype, i);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    l->abs_min = l->any_finite ? fmin(l->abs_min, a) : a;
    l->abs_max = l->any_finite ? fmax(l->abs_max, a) : a;
    l->any_finite = true;
    if (v != ceil(v)) l->int_mode = false;
}

/* Floats take their width from the non-zero finite values only, as PyTorch does. */
static void scan_width(layout *l, int64_t i) {
    if (l->is_float) {
        double v = kiln__load_as_f64(l->raw, l->dtype, i);
        if (!isfinite(v) || v == 0) return;
    }
    char s[ELEM_MAX];
    int n = elem_str(l, i, s);
    if (n > l->width) l->width = n;
}

static void choose_format(layout *l) {
    l->width = 1;
    l->int_mode = true;
    if (l->is_float) {
        each_shown(l, 0, 0, scan_range);
        if (!l->any_finite) return;
        double ratio = l->abs_max / l->abs_min;
        l->sci_mode = ratio > 1000.0 || l->abs_max > 1.0e8 || (!l->int_mode && l->abs_min < 1.0e-4);
    }
    each_shown(l, 0, 0, scan_width);
}

static void put_elem(const layout *l, text *o, int64_t i) {
    char s[ELEM_MAX];
    int n = elem_str(l, i, s);
    pad(o, l->width - n);
    put_n(o, s, (size_t)n);
}

/* The last dim: wrapped so that a line holds what fits in the line width. */
static void put_vector(const layout *l, text *o, int64_t base, int indent) {
    int dim = l->ndim - 1;
    int per_line = (LINE_WIDTH - indent) / (l->width + 2);
    if (per_line < 1) per_line = 1;
    put(o, "[");
    int64_t shown = 0;
    for (int64_t i = 0; i < l->shape[dim]; i++, shown++) {
        if (shown > 0) {
            put(o, ",");
            if (shown % per_line == 0) {
                put(o, "\n");
                pad(o, indent + 1);
            } else {
                put(o, " ");
            }
        }
        if (cut_at(l, dim, i)) {
            put(o, " ...");
            i = l->shape[dim] - EDGE_ITEMS - 1;
            continue;
        }
        put_elem(l, o, base + i * l->stride[dim]);
    }
    put(o, "]");
}

static void put_slices(const layout *l, text *o, int dim, int64_t base, int indent) {
    if (dim == l->ndim - 1) {
        put_vector(l, o, base, indent);
        return;
    }
    put(o, "[");
    for (int64_t i = 0; i < l->shape[dim]; i++) {
        if (i > 0) {
            put(o, ",");
            for (int k = 0; k < l->ndim - dim - 1; k++) put(o, "\n");
            pad(o, indent + 1);
        }
        if (cut_at(l, dim, i)) {
            put(o, "...");
            i = l->shape[dim] - EDGE_ITEMS - 1;
            continue;
        }
        put_slices(l, o, dim + 1, base + i * l->stride[dim], indent + 1);
    }
    put(o, "]");
}

/* Appends ", suffix", or starts a new line for it where the line would pass the width; the
 * length arithmetic is PyTorch's own (_add_suffixes), so lines break where its do. */
static void put_suffix(text *o, const char *suffix, int indent, size_t *last_line) {
    size_t n = strlen(suffix);
    if (*last_line + n + 2 > LINE_WIDTH) {
        put(o, ",\n");
        pad(o, indent);
        *last_line = (size_t)indent + n;
    } else {
        put(o, ", ");
        *last_line += n + 2;
    }
    put(o, suffix);
}

static void put_repr(const kiln__tensor *t, const unsigned char *raw, text *o) {
    enum { INDENT = 7 }; /* strlen("tensor(") */
    put(o, "tensor(");
    int64_t numel = kiln__tensor_numel(t);
    if (numel == 0) {
        put(o, "[]");
    } else {
        layout l = {.raw = raw, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
                    .summarize = numel > SUMMARY_THRESHOLD, .is_float = kiln__dtype_is_float(t->dtype)};
        int64_t stride = 1;
        for (int d = t->ndim - 1; d >= 0; d--) {
            l.stride[d] = stride;
            stride *= t->shape[d];
        }
        choose_format(&l);
        if (t->ndim == 0)
            put_elem(&l, o, 0);
        else
            put_slices(&l, o, 0, 0, INDENT);
    }
    const char *nl = o->s ? strrchr(o->s, '\n') : NULL;
    size_t last_line = nl ? (size_t)(o->s + o->len - nl) + 1 : o->len + 2;
    char suffix[160];
    if (t->device != KILN_CPU) {
        snprintf(suffix, sizeof suffix, "device='%s'", kiln_device_name(t->device));
        put_suffix(o, suffix, INDENT, &last_line);
    }
    if (numel == 0 && t->ndim != 1) {
        int n = snprintf(suffix, sizeof suffix, "size=(");
        for (int d = 0; d < t->ndim; d++)
            n += snprintf(suffix + n, sizeof suffix - (size_t)n, "%s%" PRId64, d ? ", " : "", t->shape[d]);
        snprintf(suffix + n, sizeof suffix - (size_t)n, ")");
        put_suffix(o, suffix, INDENT, &last_line);
    }
    bool default_dtype = t->dtype == KILN_F32 || (numel > 0 && (t->dtype == KILN_I64 || t->dtype == KILN_BOOL));
    if (!default_dtype) {
        snprintf(suffix, sizeof suffix, "dtype=kiln.%s", kiln_dtype_name(t->dtype));
        put_suffix(o, suffix, INDENT, &last_line);
    }
    put(o, ")");
}

/* The text of h into *o (freed by the caller, also on error), errors reported for op c. */
static kiln_status tensor_text(kiln__opctx *c, kiln_tensor h, text *o) {
    kiln__tensor *t = kiln__handle_peek(h, c->name, &c->err);
    if (t && kiln__ok(c, t)) {
        size_t elsize = kiln__elsize(t->dtype);
        int64_t numel = kiln__tensor_numel(t);
        size_t bytes = (size_t)numel * elsize;
        unsigned char *raw = NULL;
        if ((uint64_t)numel > SIZE_MAX / elsize || (bytes && !(raw = malloc(bytes)))) {
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "no host memory for a copy of %" PRId64 " elements", numel);
        } else {
            kiln_status st = kiln__read_borrowed(c, t, raw, bytes);
            if (st != KILN_OK) {
                free(raw);
                return st;
            }
            put_repr(t, raw, o);
            free(raw);
            if (o->oom) kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "no host memory for the text");
        }
    }
    return c->err ? kiln__error_report(c->err) : KILN_OK;
}

kiln_status kiln_to_string(kiln_tensor h, char *buf, size_t cap, size_t *needed) {
    KILN__OP_BEGIN("kiln_to_string");
    if (needed) *needed = 0;
    if (!buf && cap) {
        kiln__fail(&c, KILN_ERR_NULL, "buffer is NULL but its capacity is %zu", cap);
        kiln_status st = kiln__error_report(c.err);
        kiln__error_unref(c.err);
        return st;
    }
    if (cap) buf[0] = 0;
    text o = {0};
    kiln_status st = tensor_text(&c, h, &o);
    if (st == KILN_OK) {
        if (needed) *needed = o.len + 1;
        if (cap) {
            size_t n = o.len < cap ? o.len : cap - 1;
            memcpy(buf, o.s, n);
            buf[n] = 0;
        }
        if (o.len >= cap) {
            kiln__fail(&c, KILN_ERR_BUFFER_SIZE, "text needs %zu bytes, buffer has %zu", o.len + 1, cap);
            st = kiln__error_report(c.err);
        }
    }
    free(o.s);
    kiln__error_unref(c.err);
    return st;
}

kiln_status kiln_print(kiln_tensor h) {
    KILN__OP_BEGIN("kiln_print");
    text o = {0};
    kiln_status st = tensor_text(&c, h, &o);
    if (st == KILN_OK && (fwrite(o.s, 1, o.len, stdout) != o.len || fputc('\n', stdout) == EOF)) {
        kiln__fail(&c, KILN_ERR_IO, "writing to stdout failed");
        st = kiln__error_report(c.err);
    }
    free(o.s);
    kiln__error_unref(c.err);
    return st;
}
