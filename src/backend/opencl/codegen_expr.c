/* The op table's expressions (ir/optable.h, KILN__OPEXPR) printed as OpenCL C: the forward
 * expression of a row whose cpu column is EXPR, the same one the CPU's vector and scalar kernels
 * are expanded from, serves single ops and fused groups (codegen.c's op_expr falls through to
 * here). Each vocabulary word prints its operands' text into a small arena, bottom up. min and
 * max keep x86's rule (the second operand when either is NaN), as the CPU's kernels do. */
#include <stdarg.h>
#include <stdio.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

typedef struct {
    char buf[2048];
    size_t used;
    bool full;
    const char *type; /* the compute type: float or double */
} ex_text;

/* fmt's text appended to the arena; its start, or "" once the arena is full (then the op has
 * no OpenCL form, a clean error, never a truncated kernel). */
static const char *ex_put(ex_text *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *ex_put(ex_text *s, const char *fmt, ...) {
    if (s->full) return "";
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->buf + s->used, sizeof s->buf - s->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof s->buf - s->used) {
        s->full = true;
        return "";
    }
    const char *start = s->buf + s->used;
    s->used += (size_t)n + 1;
    return start;
}

/* Exact, as codegen.c's parameters: hexadecimal. */
static const char *ex_k(ex_text *s, double v) { return ex_put(s, "((%s)%a)", s->type, v); }

bool kiln__opencl_codegen_expr(kiln__text *b, kiln__opcode code, const char *x, const char *type) {
    ex_text arena = {.type = type}, *s = &arena;
    const char *r;
#define E_X x
#define E_K(c) ex_k(s, (c))
#define E_ADD(a, b) ex_put(s, "(%s + %s)", a, b)
#define E_SUB(a, b) ex_put(s, "(%s - %s)", a, b)
#define E_MUL(a, b) ex_put(s, "(%s * %s)", a, b)
#define E_DIV(a, b) ex_put(s, "(%s / %s)", a, b)
#define E_NEG(a) ex_put(s, "(-%s)", a)
#define E_ABS(a) ex_put(s, "fabs(%s)", a)
#define E_EXP(a) ex_put(s, "exp(%s)", a)
#define E_TANH(a) ex_put(s, "tanh(%s)", a)
#define E_SIGMOID(a) ex_put(s, "((%s)1 / ((%s)1 + exp(-%s)))", s->type, s->type, a)
#define E_MIN(a, b) ex_put(s, "(%s < %s ? %s : %s)", a, b, a, b)
#define E_MAX(a, b) ex_put(s, "(%s > %s ? %s : %s)", a, b, a, b)
#define E_LT(a, b) ex_put(s, "(%s < %s)", a, b)
#define E_GT(a, b) ex_put(s, "(%s > %s)", a, b)
#define E_WHERE(m, a, b) ex_put(s, "(%s ? %s : %s)", m, a, b)
#define E_CALL(f, a) ex_put(s, #f "(%s)", a)
    switch (code) {
#define FORWARD(NAME, name, forward, gradient) \
    case KILN__OP_##NAME: r = forward; break;
        KILN__OPEXPR(FORWARD)
#undef FORWARD
    default: return false;
    }
#include "ir/opexpr_end.h"
    if (arena.full) return false;
    kiln__text_printf(b, "%s", r);
    return true;
}

#endif
