/* Short names for the tensor-level ops that derivative formulas are written in. Every
 * function consumes its tensor arguments and returns an owned result (NULL on error, which
 * the next call propagates). Used only inside src/autodiff. */
#ifndef KILN_AD_MATH_H
#define KILN_AD_MATH_H

#include "autodiff/autodiff-impl.h"

static inline kiln__tensor *ad_ref(kiln__tensor *t) {
    if (t) kiln__tensor_retain(t);
    return t;
}
static inline kiln__tensor *ad_add(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) { return kiln__t_binary(c, KILN__OP_ADD, a, b); }
static inline kiln__tensor *ad_sub(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) { return kiln__t_binary(c, KILN__OP_SUB, a, b); }
static inline kiln__tensor *ad_mul(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) { return kiln__t_binary(c, KILN__OP_MUL, a, b); }
static inline kiln__tensor *ad_div(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) { return kiln__t_binary(c, KILN__OP_DIV, a, b); }
static inline kiln__tensor *ad_muls(kiln__opctx *c, kiln__tensor *a, double s) { return kiln__t_binary_scalar(c, KILN__OP_MUL, a, s, false); }
static inline kiln__tensor *ad_adds(kiln__opctx *c, kiln__tensor *a, double s) { return kiln__t_binary_scalar(c, KILN__OP_ADD, a, s, false); }
static inline kiln__tensor *ad_rsubs(kiln__opctx *c, kiln__tensor *a, double s) { return kiln__t_binary_scalar(c, KILN__OP_SUB, a, s, true); }
static inline kiln__tensor *ad_pows(kiln__opctx *c, kiln__tensor *a, double s) { return kiln__t_binary_scalar(c, KILN__OP_POW, a, s, false); }
static inline kiln__tensor *ad_neg(kiln__opctx *c, kiln__tensor *a) { return kiln__t_unary(c, KILN__OP_NEG, a); }
static inline kiln__tensor *ad_un(kiln__opctx *c, kiln__opcode code, kiln__tensor *a) { return kiln__t_unary(c, code, a); }
/* A mask (bool tensor) as 0/1 in dtype. */
static inline kiln__tensor *ad_as(kiln__opctx *c, kiln__tensor *mask, kiln_dtype dtype) { return kiln__t_cast(c, mask, dtype); }
/* where(mask, g, 0) */
static inline kiln__tensor *ad_keep(kiln__opctx *c, kiln__tensor *mask, kiln__tensor *g) {
    if (!g) return kiln__drop(1, mask), NULL;
    kiln__tensor *zero = kiln__t_fill(c, g->device, g->dtype, 0, NULL, 0.0);
    return kiln__t_where(c, mask, g, zero);
}

#endif
