/* Creation ops: constants, host data (copied or borrowed), ranges, random numbers. */
#include <math.h>
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

static bool check_creation(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, kiln_shape shape) {
    if (!kiln__dtype_valid(dtype)) {
        kiln__fail(c, KILN_ERR_DTYPE, "invalid dtype %d", (int)dtype);
        return false;
    }
    if (!kiln__backend_get(dev)) {
        kiln__fail(c, KILN_ERR_DEVICE, "device %s is not available", kiln_device_name(dev));
        return false;
    }
    return kiln__check_shape(c, shape);
}

kiln_tensor kiln_full(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double value) {
    KILN__OP_BEGIN("kiln_full");
    if (!check_creation(&c, dev, dtype, shape)) return kiln__result(&c, NULL);
    return kiln__result(&c, kiln__t_fill(&c, dev, dtype, shape.ndim, shape.dims, value));
}

kiln_tensor kiln_zeros(kiln_device dev, kiln_dtype dtype, kiln_shape shape) {
    KILN__OP_BEGIN("kiln_zeros");
    if (!check_creation(&c, dev, dtype, shape)) return kiln__result(&c, NULL);
    return kiln__result(&c, kiln__t_fill(&c, dev, dtype, shape.ndim, shape.dims, 0.0));
}

kiln_tensor kiln_ones(kiln_device dev, kiln_dtype dtype, kiln_shape shape) {
    KILN__OP_BEGIN("kiln_ones");
    if (!check_creation(&c, dev, dtype, shape)) return kiln__result(&c, NULL);
    return kiln__result(&c, kiln__t_fill(&c, dev, dtype, shape.ndim, shape.dims, 1.0));
}

kiln_tensor kiln_from_data(kiln_device dev, kiln_dtype dtype, kiln_shape shape, const void *data) {
    KILN__OP_BEGIN("kiln_from_data");
    if (!check_creation(&c, dev, dtype, shape)) return kiln__result(&c, NULL);
    int64_t n = kiln_shape_numel(shape);
    if (!data && n > 0) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "data is NULL"));
    kiln__tensor *t = kiln__t_empty(&c, dev, dtype, shape.ndim, shape.dims);
    if (t && n > 0) {
        /* copied now: the caller may reuse `data` as soon as this returns */
        const kiln__backend *be = kiln__backend_get(dev);
        kiln_status st = be->copy_from_host(be->context, t->storage, 0, data, (size_t)n * kiln__elsize(dtype));
        if (st != KILN_OK) kiln__tensor_release(t), t = kiln__fail(&c, st, "copy to %s failed", kiln_device_name(dev));
    }
    return kiln__result(&c, t);
}

kiln_tensor kiln_from_borrowed(kiln_dtype dtype, kiln_shape shape, const void *data, void (*on_release)(void *ctx),
                               void *ctx) {
    KILN__OP_BEGIN("kiln_from_borrowed");
    if (!check_creation(&c, KILN_CPU, dtype, shape)) return kiln__result(&c, NULL);
    int64_t n = kiln_shape_numel(shape);
    if (!data && n > 0) return kiln__result(&c, kiln__fail(&c, KILN_ERR_NULL, "data is NULL"));
    /* no callback until the handle exists: on any failure the caller still owns `data` */
    kiln__storage *s = kiln__storage_borrow((void *)data, (size_t)n * kiln__elsize(dtype), NULL, NULL);
    if (!s) return kiln__result(&c, kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a storage record"));
    int64_t strides[KILN_MAX_DIMS];
    kiln__dense_strides(shape.ndim, shape.dims, strides);
    kiln__tensor *t = kiln__tensor_wrap(s, dtype, shape.ndim, shape.dims, strides, 0);
    kiln__storage_release(s);
    if (!t) return kiln__result(&c, kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a tensor"));
    /* (a handle that cannot be made releases t, and with it s: were the callback set by then,
     * it would free `data` under a caller told that it still owns it) */
    kiln_tensor h = kiln__result(&c, t);
    if (h.id != KILN__OOM_HANDLE_ID) { /* t (the only user of s) is still this call's alone */
        s->on_release = on_release;
        s->release_ctx = ctx;
    }
    return h;
}

int64_t kiln_shape_numel(kiln_shape shape) {
    int64_t n;
    if (shape.ndim < 0 || shape.ndim > KILN_MAX_DIMS) return -1;
    return kiln__shape_numel_checked(shape.ndim, shape.dims, &n, NULL) ? n : -1;
}

/* Ops that only fill an output: ranges and random numbers. */
static kiln_tensor generate(kiln__opctx *c, kiln__opcode code, kiln_device dev, kiln_dtype dtype, int ndim,
                            const int64_t *shape, const double *f, const int64_t *i) {
    kiln__tensor *out = kiln__t_empty(c, dev, dtype, ndim, shape);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, code, c->name);
        op.out[0] = kiln__view_of(out);
        op.n_out = 1;
        for (int k = 0; k < 2; k++) {
            if (f) op.p.f[k] = f[k];
            if (i) op.pi[k] = i[k];
        }
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    return kiln__result(c, out);
}

kiln_tensor kiln_arange(kiln_device dev, kiln_dtype dtype, double start, double end, double step) {
    KILN__OP_BEGIN("kiln_arange");
    kiln_shape probe = KILN_SCALAR_SHAPE;
    if (!check_creation(&c, dev, dtype, probe)) return kiln__result(&c, NULL);
    if (step == 0 || isnan(step) || isnan(start) || isnan(end) || isinf(start) || isinf(end))
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "invalid range start=%g end=%g step=%g", start, end, step));
    double count = ceil((end - start) / step);
    if (count < 0) count = 0;
    if (count > 1e15) return kiln__result(&c, kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "range of %g elements", count));
    int64_t n = (int64_t)count;
    return generate(&c, KILN__OP_ARANGE, dev, dtype, 1, &n, (double[]){start, step}, NULL);
}

kiln_tensor kiln_linspace(kiln_device dev, kiln_dtype dtype, double start, double end, int64_t steps) {
    KILN__OP_BEGIN("kiln_linspace");
    if (!check_creation(&c, dev, dtype, KILN_SHAPE(steps))) return kiln__result(&c, NULL);
    if (isnan(start) || isnan(end)) return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "NaN bound"));
    return generate(&c, KILN__OP_LINSPACE, dev, dtype, 1, &steps, (double[]){start, end}, (int64_t[]){steps, 0});
}

kiln_tensor kiln_eye(kiln_device dev, kiln_dtype dtype, int64_t rows, int64_t cols) {
    KILN__OP_BEGIN("kiln_eye");
    if (!check_creation(&c, dev, dtype, KILN_SHAPE(rows, cols))) return kiln__result(&c, NULL);
    return generate(&c, KILN__OP_EYE, dev, dtype, 2, (int64_t[]){rows, cols}, NULL, NULL);
}

static kiln_tensor random_op(kiln__opctx *c, kiln__opcode code, kiln_device dev, kiln_dtype dtype, kiln_shape shape,
                             double a, double b, uint64_t seed) {
    if (!check_creation(c, dev, dtype, shape)) return kiln__result(c, NULL);
    if (!kiln__dtype_is_float(dtype))
        return kiln__result(c, kiln__fail(c, KILN_ERR_DTYPE, "random numbers need a float dtype, got %s", kiln_dtype_name(dtype)));
    if (!isfinite(a) || !isfinite(b)) /* an infinite bound or std only makes NaN or inf values */
        return kiln__result(c, kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "parameters must be finite (got %g, %g)", a, b));
    return generate(c, code, dev, dtype, shape.ndim, shape.dims, (double[]){a, b}, (int64_t[]){(int64_t)seed, 0});
}

kiln_tensor kiln_rand(kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed) {
    KILN__OP_BEGIN("kiln_rand");
    return random_op(&c, KILN__OP_RAND_UNIFORM, dev, dtype, shape, 0.0, 1.0, seed);
}

kiln_tensor kiln_uniform(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double lo, double hi, uint64_t seed) {
    KILN__OP_BEGIN("kiln_uniform");
    if (hi < lo) return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "uniform bounds lo=%g > hi=%g", lo, hi));
    return random_op(&c, KILN__OP_RAND_UNIFORM, dev, dtype, shape, lo, hi, seed);
}

kiln_tensor kiln_randn(kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed) {
    KILN__OP_BEGIN("kiln_randn");
    return random_op(&c, KILN__OP_RAND_NORMAL, dev, dtype, shape, 0.0, 1.0, seed);
}

kiln_tensor kiln_normal(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double mean, double std, uint64_t seed) {
    KILN__OP_BEGIN("kiln_normal");
    if (!(std >= 0)) return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "normal std %g must be >= 0", std));
    return random_op(&c, KILN__OP_RAND_NORMAL, dev, dtype, shape, mean, std, seed);
}

kiln_tensor kiln_bernoulli(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double p, uint64_t seed) {
    KILN__OP_BEGIN("kiln_bernoulli");
    if (!(p >= 0 && p <= 1)) return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "bernoulli p=%g not in [0, 1]", p));
    return random_op(&c, KILN__OP_RAND_BERNOULLI, dev, dtype, shape, p, 0.0, seed);
}

kiln_tensor kiln_empty(kiln_device dev, kiln_dtype dtype, kiln_shape shape) {
    KILN__OP_BEGIN("kiln_empty");
    if (!check_creation(&c, dev, dtype, shape)) return kiln__result(&c, NULL);
    return kiln__result(&c, kiln__t_empty(&c, dev, dtype, shape.ndim, shape.dims));
}
