/* The elementwise kernel family: registration, dtype errors, and where. Unary kernels live in
 * elementwise_unary.c, binary ones in elementwise_binary.c, those with parameters or three
 * inputs in elementwise_special.c. */
#include "backend/cpu/elementwise-impl.h"

kiln_status kiln__ew_bad_dtype(const kiln__op *op, kiln_dtype dtype) {
    kiln__kernel_error("the cpu %s kernel has no %s version (output %s)", kiln__opcode_name(op->code),
                       kiln_dtype_name(dtype), op->n_out ? kiln_dtype_name(op->out[0].dtype) : "none");
    return KILN_ERR_DTYPE;
}

/* ---- where: out = mask ? a : b, moved as raw elements of any dtype ------------------------ */
#define WHERE_FN(bits)                                                                                \
    static void where_##bits(void *ctx, int64_t n, char **p, const int64_t *st) {                     \
        typedef uint##bits##_t T;                                                                     \
        const int64_t es = (int64_t)sizeof(T);                                                        \
        if (st[0] == es && st[1] == 1 && st[2] == es && st[3] == es) {                                \
            T *o = (T *)p[0];                                                                         \
            const uint8_t *m = (const uint8_t *)p[1];                                                 \
            const T *a = (const T *)p[2], *b = (const T *)p[3];                                       \
            int64_t body = n & ~(KILN__EW_BLOCK - 1);                                                 \
            /* a select of two loaded values (not a conditional load) is what vectorises */           \
            KILN__SIMD for (int64_t i = 0; i < body; i++) {                                           \
                T x = a[i], y = b[i];                                                                 \
                o[i] = m[i] ? x : y;                                                                  \
            }                                                                                         \
            for (int64_t i = body; i < n; i++) o[i] = m[i] ? a[i] : b[i];                             \
            return;                                                                                   \
        }                                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                             \
            const char *src = *(const uint8_t *)(p[1] + i * st[1]) ? p[2] + i * st[2] : p[3] + i * st[3]; \
            *(T *)(p[0] + i * st[0]) = *(const T *)src;                                               \
        }                                                                                             \
    }
WHERE_FN(8)
WHERE_FN(16)
WHERE_FN(32)
WHERE_FN(64)

static kiln__loop_fn where_loop(const kiln_dtype *in, kiln_dtype dt) {
    if (in[0] != KILN_BOOL || in[1] != dt || in[2] != dt || !kiln__dtype_valid(dt)) return NULL;
    switch (kiln__elsize(dt)) {
    case 1: return where_8;
    case 2: return where_16;
    case 4: return where_32;
    default: return where_64;
    }
}

static kiln_status kernel_where(const kiln__op *op) {
    kiln_dtype in[3] = {op->in[0].dtype, op->in[1].dtype, op->in[2].dtype};
    kiln__loop_fn fn = where_loop(in, op->out[0].dtype);
    if (!fn) return kiln__ew_bad_dtype(op, op->in[1].dtype);
    kiln__view v[4] = {op->out[0], op->in[0], op->in[1], op->in[2]};
    kiln__cpu_foreach(4, v, fn, NULL, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

bool kiln__ew_loop_find(kiln__opcode code, int n_in, const kiln_dtype *in, kiln_dtype out, const double *param,
                        kiln__ew_loop *l) {
    *l = (kiln__ew_loop){0};
    for (int i = 1; i < n_in; i++) /* every family takes one input dtype (where: past the mask) */
        if (in[i] != in[n_in == 3 ? 1 : 0]) return false;
    switch (n_in) {
    case 1:
        if (code == KILN__OP_COPY) return kiln__cpu_copy_loop(in[0], out, l);
        return kiln__ew_unary_loop(code, in[0], out, param, l) || kiln__ew_special_loop(code, in[0], out, param, l);
    case 2:
        if (code == KILN__OP_FMOD || code == KILN__OP_REMAINDER || code == KILN__OP_ATAN2)
            return kiln__ew_special_loop(code, in[0], out, param, l);
        return kiln__ew_binary_loop(code, in[0], out, l);
    case 3: return code == KILN__OP_WHERE && (l->fn = where_loop(in, out)) != NULL;
    default: return false;
    }
}

void kiln__cpu_register_elementwise(kiln__kernel_fn *table) {
    kiln__cpu_register_unary(table);
    kiln__cpu_register_binary(table);
    kiln__cpu_register_special(table);
    table[KILN__OP_WHERE] = kernel_where;
}
