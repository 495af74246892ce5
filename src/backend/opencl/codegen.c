/* The expression IR (ir/expr.h) printed as OpenCL C. One kernel "k" evaluates every node of a
 * group per element: work item i computes element i of the group's iteration space, loading
 * each input through its offset and strides (passed as arguments, so one source serves every
 * shape of the same rank and layout class) and storing each stored node. Constants travel as
 * arguments too; op parameters (clamp bounds, slopes) are printed into the source. The
 * formulas follow the CPU kernels (src/backend/cpu/elementwise*.c) line by line, with
 * FP_CONTRACT off and correctly rounded division and sqrt, so exact ops give the CPU's bits.
 *
 *   __kernel void k(long n, long8 shape, __global const float *in0, long io0, long8 is0,
 *                   __global float *out0, long oo0, long8 os0) {
 *       long i = get_global_id(0); if (i >= n) return;
 *       float v0 = in0[io0 + i]; float v1 = exp(v0); out0[oo0 + i] = v1; }
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

void kiln__opencl_src_prelude(kiln__text *b, bool fp64) {
    kiln__text_printf(b, "%s",
                      "#pragma OPENCL FP_CONTRACT OFF\n"
                      "inline float bf2f(ushort h) { return as_float((uint)h << 16); }\n"
                      "inline ushort f2bf(float f) { uint u = as_uint(f);\n"
                      "  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);\n"
                      "  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }\n");
    if (fp64) kiln__text_printf(b, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
}

const char *kiln__opencl_ctype(kiln_dtype d) {
    switch (d) {
    case KILN_F64: return "double";
    case KILN_I32: return "int";
    case KILN_I64: return "long";
    case KILN_BOOL: return "uchar";
    default: return "float";
    }
}

const char *kiln__opencl_storetype(kiln_dtype d) {
    switch (d) {
    case KILN_F16: return "half";
    case KILN_BF16: return "ushort";
    default: return kiln__opencl_ctype(d);
    }
}

const char *const kiln__opencl_layout_helpers =
    "inline void unpack(long8 v, long *a) { vstore8(v, 0, a); }\n"
    /* offsets of output element o: in (kept coordinates) and out */
    "inline void locate(long o, const long *oshape, const long *istr, const long *ostr, long *ib, long *ob) {\n"
    "  for (int d = 7; d >= 0; d--) { long c = o % oshape[d]; o /= oshape[d]; *ib += c * istr[d]; *ob += c * ostr[d]; } }\n"
    /* offset of reduced element j from the output's base */
    "inline long roff(long j, const long *rshape, const long *istr) {\n"
    "  long off = 0; for (int d = 7; d >= 0; d--) { long c = j % rshape[d]; j /= rshape[d]; off += c * istr[d]; } return off; }\n"
    /* row-major coordinates of element e, and an offset from coordinates */
    "inline void coords(long e, const long *shape, long *c) { for (int d = 7; d >= 0; d--) { c[d] = e % shape[d]; e /= shape[d]; } }\n"
    "inline long dot(const long *c, const long *st) { long o = 0; for (int d = 0; d < 8; d++) o += c[d] * st[d]; return o; }\n";

void kiln__opencl_pack8(cl_long8 *v, const int64_t *a, int nd, int64_t pad) {
    int off = 8 - nd; /* leading pads: size 1, stride 0 */
    for (int d = 0; d < 8; d++) v->s[d] = d < off ? pad : a[d - off];
}

static bool is_float(kiln_dtype d) { return kiln__dtype_is_float(d); }

/* A double as an OpenCL C literal (exact: hexadecimal). */
static void lit(char *buf, size_t cap, double v) {
    if (isnan(v)) snprintf(buf, cap, "NAN");
    else if (isinf(v)) snprintf(buf, cap, v > 0 ? "INFINITY" : "(-INFINITY)");
    else snprintf(buf, cap, "(%a)", v);
}

/* The value of node i converted to dtype `to` the way the CPU's COPY does (through double). */
static void convert(kiln__text *b, const char *x, kiln_dtype from, kiln_dtype to, bool fp64) {
    const char *fc = kiln__opencl_ctype(from), *tc = kiln__opencl_ctype(to);
    if (strcmp(fc, tc) == 0) kiln__text_printf(b, "%s", x);
    else if (to == KILN_BOOL) kiln__text_printf(b, "(uchar)(%s != 0)", x);
    else if (to == KILN_I32 || to == KILN_I64) kiln__text_printf(b, from == KILN_BOOL ? "(%s)%s" : "convert_%s_sat(%s)", tc, x);
    else if (strcmp(tc, "float") == 0 && from == KILN_I64 && fp64) kiln__text_printf(b, "(float)(double)%s", x);
    else kiln__text_printf(b, "(%s)%s", tc, x);
}

/* Integer clamp bounds saturate to the dtype's range; NaN means no bound. */
static long long int_bound(double v, long long none, long long lo, long long hi) {
    if (isnan(v)) return none;
    if (v >= (double)hi) return hi;
    if (v <= (double)lo) return lo;
    return (long long)v;
}

/* Each row's OpenCL form (ir/optable.h, KILN__OPTABLE_DEVICE_C), by opcode; NULL forms for an
 * EXPR row (its KILN__OPEXPR expression) and for opcodes outside the table. */
typedef enum { ON_FLOAT, ON_ANY, ON_NOT_BOOL, ON_FLOAT_IN } form_on;
static const struct {
    form_on on;
    const char *float_form, *int_form;
} forms[KILN__OP_COUNT] = {
#define FORM(NAME, on_, float_form_, int_form_) [KILN__OP_##NAME] = {ON_##on_, float_form_, int_form_},
    KILN__OPTABLE_DEVICE_C(FORM)
#undef FORM
};

/* A clamp bound: a float's NaN is none (-inf or +inf), an integer's saturates to the dtype. */
static void clamp_bound(char *buf, size_t cap, const kiln__expr_node *n, int k) {
    double v = n->param[k];
    if (kiln__dtype_is_float(n->dtype)) {
        if (isnan(v)) snprintf(buf, cap, k == 0 ? "(-INFINITY)" : "INFINITY");
        else lit(buf, cap, v);
        return;
    }
    long long lo = n->dtype == KILN_I32 ? INT32_MIN : INT64_MIN, hi = n->dtype == KILN_I32 ? INT32_MAX : INT64_MAX;
    long long b = int_bound(v, k == 0 ? lo : hi, lo, hi);
    /* INT64_MIN has no literal: written as an expression */
    snprintf(buf, cap, b == INT64_MIN ? "(-9223372036854775807L - 1)" : "%lldL", b);
}

/* Prints the expression of an OP node from its row's form; false when the opcode has no OpenCL
 * form for the node's dtypes. */
static bool op_expr(kiln__text *b, const kiln__expr *e, const kiln__expr_node *n, bool fp64) {
    char X[16];
    snprintf(X, sizeof X, "v%d", n->arg[0]);
    kiln_dtype in = e->node[n->arg[0]].dtype;
    const char *T = kiln__opencl_ctype(n->dtype);
    bool f = is_float(n->dtype);
    if ((unsigned)n->code >= KILN__OP_COUNT) return false;
    const char *form = f ? forms[n->code].float_form : forms[n->code].int_form;
    if (!forms[n->code].float_form) return f && kiln__opencl_codegen_expr(b, n->code, X, T); /* an EXPR row */
    bool has = forms[n->code].on == ON_ANY || (forms[n->code].on == ON_FLOAT && f) ||
               (forms[n->code].on == ON_NOT_BOOL && n->dtype != KILN_BOOL) ||
               (forms[n->code].on == ON_FLOAT_IN && is_float(in));
    if (!has) return false;
    for (const char *c = form; *c; c++) {
        if (*c != '$' || !c[1]) {
            kiln__text_put(b, c, 1);
            continue;
        }
        char word[48];
        switch (*++c) {
        case 'x': case 'y': case 'z': {
            int k = *c - 'x';
            snprintf(word, sizeof word, "v%d", n->n_args > k ? n->arg[k] : 0);
            break;
        }
        case 'T': snprintf(word, sizeof word, "%s", T); break;
        case 'U': snprintf(word, sizeof word, "%s", n->dtype == KILN_I32 ? "uint" : "ulong"); break;
        case '0': case '1': case '2': lit(word, sizeof word, n->param[*c - '0']); break;
        case 'L': case 'H': clamp_bound(word, sizeof word, n, *c == 'H'); break;
        case 'C': convert(b, X, in, n->dtype, fp64); word[0] = 0; break;
        default: return false; /* a word the table has no meaning for: no kernel, never a wrong one */
        }
        kiln__text_printf(b, "%s", word);
    }
    return true;
}

bool kiln__opencl_codegen_op(kiln__text *b, const kiln__fused *g, int i, bool fp64) {
    return g->expr.node[i].kind == KILN__EXPR_OP && op_expr(b, &g->expr, &g->expr.node[i], fp64);
}

/* True when v walks the iteration space densely (row-major, size-1 dims ignored). */
static bool dense_in(const kiln__fused *g, const kiln__view *v) {
    int64_t expect = 1;
    for (int d = g->ndim - 1; d >= 0; d--) {
        if (g->shape[d] == 1) continue;
        if (v->strides[d] != expect) return false;
        expect *= g->shape[d];
    }
    return true;
}

static void print_index(kiln__text *b, const kiln__fused *g, bool dense, char kind, int k) {
    if (dense) {
        kiln__text_printf(b, "%co%d + i", kind, k);
        return;
    }
    kiln__text_printf(b, "%co%d", kind, k);
    for (int d = 0; d < g->ndim; d++) kiln__text_printf(b, " + c%d * %cs%d.s%d", d, kind, k, d);
}

static void push(kiln__opencl_ew_launch *l, size_t size, const void *ptr) {
    l->args[l->n_args++] = (kiln__opencl_arg){size, ptr};
}

static void set_layout(const kiln__fused *g, const kiln__view *v, cl_long *off, cl_long8 *st) {
    *off = v->offset;
    for (int d = 0; d < 8; d++) st->s[d] = d < g->ndim ? v->strides[d] : 0;
}

/* Checks every node's dtype, prints the prelude and the signature of kernel "k" (n, shape,
 * each input and stored output with its offset and strides, each constant) and pushes the
 * launch arguments. A per-row load (ir/expr.h) reads its reduced-shape input at offset + row
 * * strides.s0: the host passes s0 = 1 for a dense one, 0 for one value. */
bool kiln__opencl_codegen_params(const kiln__fused *g, bool fp64, kiln__text *b, kiln__opencl_ew_launch *l) {
    const kiln__expr *e = &g->expr;
    l->n_args = 0;
    l->local = 0;
    l->n = 1;
    for (int d = 0; d < 8; d++) l->shape.s[d] = d < g->ndim ? g->shape[d] : 1;
    for (int d = 0; d < g->ndim; d++) l->n *= g->shape[d];
    for (int i = 0; i < e->n_nodes; i++) {
        kiln_dtype dt = e->node[i].dtype;
        if (!kiln__dtype_valid(dt) || (dt == KILN_F64 && !fp64)) {
            kiln__kernel_error("this OpenCL device has no %s arithmetic", kiln_dtype_name(dt));
            return false;
        }
    }
    kiln__opencl_src_prelude(b, fp64);
    for (int i = 0; i < e->n_nodes; i++)
        if (e->node[i].kind == KILN__EXPR_OP && e->node[i].dtype == KILN_F16) { /* rounds through a half in memory */
            kiln__text_printf(b, "inline float rf16(float f) { ushort u; vstore_half_rte(f, 0, (__private half *)&u);\n"
                                   "  return vload_half(0, (__private const half *)&u); }\n");
            break;
        }
    kiln__text_printf(b, "__kernel void k(long n, long8 shape");
    push(l, sizeof l->n, &l->n);
    push(l, sizeof l->shape, &l->shape);
    for (int k = 0; k < e->n_inputs; k++) {
        kiln__text_printf(b, ", __global const %s *in%d, long io%d, long8 is%d", kiln__opencl_storetype(g->input[k].dtype), k, k, k);
        l->mem[k] = kiln__opencl_mem(g->input[k].storage);
        set_layout(g, &g->input[k], &l->off[k], &l->strides[k]);
        push(l, sizeof(cl_mem), &l->mem[k]);
        push(l, sizeof(cl_long), &l->off[k]);
        push(l, sizeof(cl_long8), &l->strides[k]);
    }
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        if (n->kind != KILN__EXPR_LOAD || !n->rows) continue;
        const kiln__view *v = &g->input[n->input];
        bool scalar = true;
        for (int d = 0; d < v->ndim; d++) scalar &= v->shape[d] == 1 || v->strides[d] == 0;
        l->strides[n->input].s[0] = scalar ? 0 : 1; /* dense in the reduced shape otherwise (the join checked) */
    }
    for (int s = 0; s < e->n_stores; s++) {
        const kiln__view *v = &g->output[e->store[s].output];
        int j = KILN__EXPR_MAX_INPUTS + s;
        kiln__text_printf(b, ", __global %s *out%d, long oo%d, long8 os%d", kiln__opencl_storetype(v->dtype), s, s, s);
        l->mem[j] = kiln__opencl_mem(v->storage);
        set_layout(g, v, &l->off[j], &l->strides[j]);
        push(l, sizeof(cl_mem), &l->mem[j]);
        push(l, sizeof(cl_long), &l->off[j]);
        push(l, sizeof(cl_long8), &l->strides[j]);
    }
    for (int i = 0; i < e->n_nodes; i++) {
        if (e->node[i].kind != KILN__EXPR_CONST) continue;
        kiln__text_printf(b, ", %s cv%d", fp64 ? "double" : "float", i);
        double v = e->node[i].value;
        if (e->node[i].dtype == KILN_F16) v = kiln__f16_to_f32(kiln__f32_to_f16((float)v));
        if (e->node[i].dtype == KILN_BF16) v = kiln__bf16_to_f32(kiln__f32_to_bf16((float)v));
        if (fp64) {
            l->consts[i] = v;
            push(l, sizeof(cl_double), &l->consts[i]);
        } else {
            memcpy(&l->consts[i], &(cl_float){(cl_float)v}, sizeof(cl_float));
            push(l, sizeof(cl_float), &l->consts[i]);
        }
    }
    kiln__text_printf(b, ") {\n");
    return true;
}

/* Prints node i (a CONST, LOAD or OP) as the declaration of v<i>; index(b, ctx, k) prints the
 * element index of input k. */
bool kiln__opencl_codegen_node(kiln__text *b, const kiln__fused *g, int i, bool fp64,
                           void (*index)(kiln__text *b, const void *ctx, int k), const void *ctx) {
    const kiln__expr *e = &g->expr;
    const kiln__expr_node *n = &e->node[i];
    const char *T = kiln__opencl_ctype(n->dtype);
    kiln__text_printf(b, "  %s v%d = ", T, i);
    if (n->kind == KILN__EXPR_CONST) {
        kiln__text_printf(b, "(%s)cv%d", T, i); /* f16/bf16: rounded on the host, as the CPU does */
    } else if (n->kind == KILN__EXPR_LOAD) {
        int k = n->input;
        kiln_dtype dt = g->input[k].dtype;
        const char *pre = dt == KILN_F16 ? "vload_half(" : dt == KILN_BF16 ? "bf2f(in%d[" : "in%d[";
        if (dt == KILN_F16) kiln__text_printf(b, "%s", pre);
        else kiln__text_printf(b, pre, k);
        index(b, ctx, k);
        if (dt == KILN_F16) kiln__text_printf(b, ", in%d)", k);
        else kiln__text_printf(b, dt == KILN_BF16 ? "])" : "]");
        if (dt == KILN_BOOL) kiln__text_printf(b, " != 0");
    } else if (n->kind != KILN__EXPR_OP || !op_expr(b, e, n, fp64)) {
        kiln__kernel_error("no OpenCL kernel for %s on %s yet", kiln__opcode_name(n->code),
                           kiln_dtype_name(e->node[n->kind == KILN__EXPR_OP ? n->arg[0] : i].dtype));
        return false;
    }
    kiln__text_printf(b, ";\n");
    /* an f16 / bf16 result is rounded to its dtype, as the unfused op's store would (a fused
     * group may not store it) */
    if (n->kind == KILN__EXPR_OP && n->dtype == KILN_F16) kiln__text_printf(b, "  v%d = rf16(v%d);\n", i, i);
    if (n->kind == KILN__EXPR_OP && n->dtype == KILN_BF16) kiln__text_printf(b, "  v%d = bf2f(f2bf(v%d));\n", i, i);
    return true;
}

/* Prints the store of stored output s (its node's value) at element index idx. */
void kiln__opencl_codegen_store(kiln__text *b, const kiln__fused *g, int s, const char *idx) {
    int node = g->expr.store[s].node;
    kiln_dtype dt = g->output[g->expr.store[s].output].dtype;
    if (dt == KILN_F16) kiln__text_printf(b, "  vstore_half_rte(v%d, %s, out%d);\n", node, idx, s);
    else if (dt == KILN_BF16) kiln__text_printf(b, "  out%d[%s] = f2bf(v%d);\n", s, idx, node);
    else kiln__text_printf(b, "  out%d[%s] = v%d;\n", s, idx, node);
}

typedef struct {
    const kiln__fused *g;
    const bool *dense;
} ew_index;

static void ew_input_index(kiln__text *b, const void *ctx, int k) {
    const ew_index *x = ctx;
    print_index(b, x->g, x->dense[k], 'i', k);
}

bool kiln__opencl_codegen_elementwise(const kiln__fused *g, bool fp64, bool vec_rows, kiln__text *b, kiln__opencl_ew_launch *l) {
    if (g->row > 0)
        return vec_rows && kiln__opencl_rows_vec_takes(g) ? kiln__opencl_codegen_rows_vec(g, fp64, b, l)
                                                      : kiln__opencl_codegen_rows(g, fp64, b, l);
    const kiln__expr *e = &g->expr;
    bool all_dense = true, dense_k[KILN__EXPR_MAX_INPUTS + KILN__EXPR_MAX_OUTPUTS];
    for (int k = 0; k < e->n_inputs; k++) all_dense &= dense_k[k] = dense_in(g, &g->input[k]);
    for (int s = 0; s < e->n_stores; s++)
        all_dense &= dense_k[KILN__EXPR_MAX_INPUTS + s] = dense_in(g, &g->output[e->store[s].output]);
    if (!kiln__opencl_codegen_params(g, fp64, b, l)) return false;
    kiln__text_printf(b, "  long i = get_global_id(0);\n  if (i >= n) return;\n");
    if (!all_dense) { /* 32-bit divisions when the space allows: a 64-bit one costs several times more */
        const char *I = l->n <= INT32_MAX ? "uint" : "long";
        kiln__text_printf(b, "  %s r = (%s)i;\n", I, I);
        for (int d = g->ndim - 1; d >= 0; d--)
            kiln__text_printf(b, "  long c%d = r %% (%s)shape.s%d; r /= (%s)shape.s%d;\n", d, I, d, I, d);
    }
    ew_index x = {g, dense_k};
    for (int i = 0; i < e->n_nodes; i++)
        if (!kiln__opencl_codegen_node(b, g, i, fp64, ew_input_index, &x)) return false;
    for (int s = 0; s < e->n_stores; s++) {
        kiln__text idx = {0};
        print_index(&idx, g, dense_k[KILN__EXPR_MAX_INPUTS + s], 'o', s);
        if (idx.oom) b->oom = true;
        else kiln__opencl_codegen_store(b, g, s, idx.s);
        free(idx.s);
    }
    kiln__text_printf(b, "}\n");
    if (b->oom) kiln__kernel_error("out of host memory generating an OpenCL kernel");
    return !b->oom;
}

#endif
