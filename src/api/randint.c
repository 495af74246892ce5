/* Random integers in [low, high) (torch.randint): uniform f64 draws scaled to the span, rounded
 * down and shifted, composed from public ops in the op's own scope so that an error inside
 * names kiln_randint. Every integer of the span is equally likely up to the f64 draw's
 * resolution (spans up to 2^53); the dtype must hold low and high - 1 exactly. */
#include <math.h>

#include "kiln/tensor.h"
#include "ops/generator-impl.h"
#include "ops/ops-impl.h"

/* The largest integer the dtype holds, every smaller one held exactly too; 0 for bool. */
static double exact_limit(kiln_dtype dtype) {
    switch (dtype) {
    case KILN_I32: return 2147483647.0;
    case KILN_I64:
    case KILN_F64: return 9007199254740992.0; /* 2^53: the f64 draw's resolution as well */
    case KILN_F32: return 16777216.0;
    case KILN_F16: return 2048.0;
    case KILN_BF16: return 256.0;
    default: return 0;
    }
}

static kiln_tensor randint(const char *op, kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low, int64_t high,
                           uint64_t seed) {
    KILN__OP_BEGIN(op);
    double limit = exact_limit(dtype), span = (double)high - (double)low;
    if ((unsigned)dtype >= KILN_DTYPE_COUNT || limit == 0)
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_DTYPE, "random integers need an integer or float dtype, got %s",
                                           kiln_dtype_name(dtype)));
    if (low >= high)
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "low %lld must be below high %lld", (long long)low,
                                           (long long)high));
    if (-(double)low > limit || (double)high - 1 > limit || span > 9007199254740992.0)
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT,
                                           "[%lld, %lld) does not fit %s exactly (integers up to %.0f in size)",
                                           (long long)low, (long long)high, kiln_dtype_name(dtype), limit));
    const char *outer = kiln__op_scope_enter(op);
    /* floor(u * span) for u in [0, 1) is below span, but u * span may round up to it */
    kiln_tensor k = kiln_clamp(kiln_floor(kiln_uniform(dev, KILN_F64, shape, 0.0, span, seed)), 0.0, span - 1);
    kiln_tensor out = kiln_cast(kiln_add_scalar(k, (double)low), dtype);
    kiln__op_scope_leave(outer);
    return out;
}

kiln_tensor kiln_randint(kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low, int64_t high, uint64_t seed) {
    return randint("kiln_randint", dev, dtype, shape, low, high, seed);
}

kiln_tensor kiln_randint_gen(kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low,
                             int64_t high) {
    if (g && !kiln__object_live(g, KILN__GENERATOR_KIND)) return kiln__generator_refused("kiln_randint_gen", g, KILN_NONE);
    return randint("kiln_randint_gen", dev, dtype, shape, low, high, kiln__generator_draw(g));
}
