/* Users' registered ops: the registry (a list that only grows, so an op's pointer and name stay
 * valid for the op records queued with them), the forward op, and the trampoline through
 * which the CPU backend runs a user's kernel. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/threadpool.h"
#include "engine/substitute.h"
#include "ops/custom_op-impl.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_custom_op *registry; /* guarded by registry_lock */

kiln_status kiln_custom_op_error(const char *fmt, ...) {
    char detail[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    kiln__kernel_error("%s", detail);
    return KILN_ERR_INVALID_ARGUMENT;
}

void kiln_parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    if (fn) kiln__parallel_for(n, grain < 1 ? 1 : grain, fn, ctx);
}

static kiln_custom_op *find_locked(const char *name) {
    for (kiln_custom_op *op = registry; op; op = op->next)
        if (strcmp(op->name, name) == 0) return op;
    return NULL;
}

kiln_custom_op *kiln_custom_op_find(const char *name) {
    if (!name) return NULL;
    pthread_mutex_lock(&registry_lock);
    kiln_custom_op *op = find_locked(name);
    pthread_mutex_unlock(&registry_lock);
    return op;
}

static kiln_status run_cpu(const kiln__op *op, int threads);

/* prelude followed by source, in one new string (NULL when out of memory) */
static char *with_prelude(const char *prelude, const char *source) {
    size_t a = strlen(prelude), b = strlen(source);
    char *s = malloc(a + b + 1);
    if (s) memcpy(s, prelude, a), memcpy(s + a, source, b + 1);
    return s;
}

kiln_status kiln_custom_op_register(const kiln_custom_op_def *def, kiln_custom_op **out) {
    static const char *const me = "kiln_custom_op_register";
    if (out) *out = NULL;
    if (!def || !out) return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "def and out must not be NULL");
    if (!def->name || !def->name[0])
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "an op needs a non-empty name");
    size_t len = strnlen(def->name, 256);
    if (len >= 256) return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op name longer than 255 bytes");
    if (def->n_inputs < 1 || def->n_inputs > KILN_CUSTOM_MAX_INPUTS)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op %s: n_inputs %d is out of range (1..%d)", def->name,
                            def->n_inputs, KILN_CUSTOM_MAX_INPUTS);
    if (!def->shape) return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op %s has no shape rule", def->name);
    if (!def->cpu_kernel) return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op %s has no CPU kernel", def->name);
    bool has_src = def->opencl_source && def->opencl_source[0], has_kernel = def->opencl_kernel && def->opencl_kernel[0];
    if (has_src != has_kernel)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op %s: an OpenCL kernel needs both its source and its name",
                            def->name);
    if (def->opencl_layout && !has_src)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op %s asks for OpenCL layouts but has no OpenCL kernel",
                            def->name);
    kiln_custom_op *op = malloc(sizeof *op + len + 1);
    char *cl_source = has_src ? with_prelude(def->opencl_layout ? KILN__CUSTOM_CL_LAYOUT_PRELUDE : "", def->opencl_source)
                              : NULL;
    char *cl_kernel = has_src ? strdup(def->opencl_kernel) : NULL;
    if (!op || (has_src && (!cl_source || !cl_kernel))) {
        free(op), free(cl_source), free(cl_kernel);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, me, "cannot allocate op %s", def->name);
    }
    memcpy(op->name, def->name, len + 1);
    op->head = (kiln__custom_head){.run_cpu = run_cpu, .cl_source = cl_source, .cl_kernel = cl_kernel,
                                   .cl_layout = has_src && def->opencl_layout};
    op->def = *def;
    op->def.name = op->name;
    op->def.opencl_source = cl_source;
    op->def.opencl_kernel = cl_kernel;
    kiln__pattern pattern;
    char why[384];
    bool has_pattern = def->pattern || def->pattern_len;
    if (has_pattern && (!def->pattern || !kiln__custom_pattern_make(op, &pattern, why, sizeof why))) {
        free(op), free(cl_source), free(cl_kernel);
        if (!def->pattern) return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "op %s: pattern_len %d but no pattern", def->name, def->pattern_len);
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "%s", why);
    }
    op->def.pattern = NULL; /* (translated: the caller's array need not outlive this call) */
    pthread_mutex_lock(&registry_lock);
    bool taken = find_locked(op->name) != NULL;
    if (!taken) op->next = registry, registry = op;
    pthread_mutex_unlock(&registry_lock);
    if (taken) {
        free(op), free(cl_source), free(cl_kernel);
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, me, "an op named %s is registered already", def->name);
    }
    if (has_pattern && !kiln__subst_register(&pattern, why, sizeof why))
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, me, "op %s is registered, its pattern not: %s", def->name, why);
    *out = op;
    return KILN_OK;
}

/* ---- the forward op ---------------------------------------------------------------------- */

static bool output_meta(kiln__opctx *c, const kiln_custom_op *op, int n, kiln__tensor *const *in,
                        kiln_custom_meta *out) {
    kiln_custom_meta metas[KILN_CUSTOM_MAX_INPUTS];
    for (int i = 0; i < n; i++) {
        metas[i] = (kiln_custom_meta){.dtype = in[i]->dtype, .ndim = in[i]->ndim};
        memcpy(metas[i].shape, in[i]->shape, sizeof metas[i].shape);
    }
    *out = (kiln_custom_meta){.dtype = in[0]->dtype, .ndim = -1};
    kiln__kernel_error("%s", "");
    kiln_status st = op->def.shape(n, metas, out, op->def.user_data);
    char detail[384];
    snprintf(detail, sizeof detail, "%s", kiln__kernel_error_detail());
    kiln__kernel_error("%s", "");
    if (st != KILN_OK) {
        kiln__fail(c, st, "shape rule failed: %s", detail[0] ? detail : kiln_status_str(st));
        return false;
    }
    if (out->ndim < 0 || out->ndim > KILN_MAX_DIMS) {
        kiln__fail(c, KILN_ERR_SHAPE, "shape rule gave %d dims (0..%d allowed)", out->ndim, KILN_MAX_DIMS);
        return false;
    }
    if (!kiln__dtype_valid(out->dtype)) {
        kiln__fail(c, KILN_ERR_DTYPE, "shape rule gave an unknown dtype %d", (int)out->dtype);
        return false;
    }
    return kiln__check_dims(c, out->ndim, out->shape);
}

/* x (consumed) if it is dense from its storage's first element, else a dense copy of it. */
static kiln__tensor *dense_from_start(kiln__opctx *c, kiln__tensor *x) {
    if (x->offset == 0 && kiln__tensor_is_contiguous(x)) return x;
    kiln__tensor *copy = kiln__t_empty(c, x->device, x->dtype, x->ndim, x->shape);
    if (copy && !kiln__t_copy_into(c, kiln__view_of(copy), x)) kiln__tensor_release(copy), copy = NULL;
    kiln__tensor_release(x);
    return copy;
}

kiln__tensor *kiln__t_custom(kiln__opctx *c, const kiln_custom_op *op, int n, kiln__tensor **in) {
    kiln__tensor *out = NULL;
    bool ok = true;
    for (int i = 0; i < n; i++) ok = kiln__ok(c, in[i]) && ok;
    for (int i = 1; ok && i < n; i++) ok = kiln__same_device(c, in[0], in[i]);
    kiln_custom_meta meta;
    if (ok && in[0]->device != KILN_CPU && !(kiln_device_kind(in[0]->device) == KILN_KIND_OPENCL && op->head.cl_source)) {
        kiln__fail(c, KILN_ERR_UNSUPPORTED, "op %s has %s, got a tensor on %s: move it to the CPU", op->name,
                   op->head.cl_source ? "CPU and OpenCL kernels only" : "no OpenCL kernel (a CPU kernel only)",
                   kiln_device_name(in[0]->device));
        ok = false;
    }
    /* an OpenCL kernel reads its inputs dense from their first element, unless it takes layouts */
    for (int i = 0; ok && in[0]->device != KILN_CPU && !op->head.cl_layout && i < n; i++)
        ok = (in[i] = dense_from_start(c, in[i])) != NULL;
    if (ok && output_meta(c, op, n, in, &meta)) {
        kiln_device dev = in[0]->device;
        kiln__op rec;
        kiln__op_init(&rec, KILN__OP_CUSTOM, c->name);
        for (int i = 0; i < n; i++) kiln__view_set(&rec.in[i], in[i]);
        /* (after the views: the first input's tensor object may become the output) */
        out = op->def.in_place ? kiln__t_output_taking(c, dev, meta.dtype, meta.ndim, meta.shape, in, 1)
                               : kiln__t_empty(c, dev, meta.dtype, meta.ndim, meta.shape);
        if (out) {
            kiln__view_set(&rec.out[0], out);
            rec.n_in = (int8_t)n;
            rec.n_out = 1;
            rec.p.i[0] = (int64_t)(uintptr_t)op;
            if (!kiln__t_submit(c, &rec, dev)) kiln__tensor_release(out), out = NULL;
        }
    }
    for (int i = 0; i < n; i++) kiln__tensor_release(in[i]);
    return out;
}

/* ---- the trampoline ---------------------------------------------------------------------- */

static void operand_of(const kiln__view *v, kiln_custom_operand *o, double *number) {
    if (!v->storage) { /* a number a pattern captured (KILN_PATTERN_NUMBER): a 0-d f64 */
        *number = v->scalar;
        *o = (kiln_custom_operand){.data = number, .dtype = KILN_F64, .ndim = 0, .shape = v->shape, .strides = v->strides};
        return;
    }
    *o = (kiln_custom_operand){.data = kiln__view_ptr(v), .dtype = v->dtype, .ndim = v->ndim, .shape = v->shape,
                               .strides = v->strides};
}

static kiln_status run_cpu(const kiln__op *rec, int threads) {
    const kiln_custom_op *op = (const kiln_custom_op *)kiln__custom_of(rec);
    kiln_custom_operand ins[KILN_CUSTOM_MAX_INPUTS], out;
    double numbers[KILN_CUSTOM_MAX_INPUTS];
    for (int i = 0; i < rec->n_in; i++) operand_of(&rec->in[i], &ins[i], &numbers[i]);
    operand_of(&rec->out[0], &out, NULL);
    kiln__kernel_error("%s", "");
    kiln_status st = op->def.cpu_kernel(rec->n_in, ins, &out, threads, op->def.user_data);
    if (st != KILN_OK && !kiln__kernel_error_detail()[0]) kiln__kernel_error("kernel returned %s", kiln_status_str(st));
    return st;
}
