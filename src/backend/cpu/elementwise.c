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

static kiln_status kernel_where(const kiln__op *op) {
    kiln_dtype dt = op->out[0].dtype;
    if (op->in[0].dtype != KILN_BOOL || op->in[1].dtype != dt || op->in[2].dtype != dt || !kiln__dtype_valid(dt))
        return kiln__ew_bad_dtype(op, op->in[1].dtype);
    kiln__loop_fn fn;
    switch (kiln__elsize(dt)) {
    case 1: fn = where_8; break;
    case 2: fn = where_16; break;
    case 4: fn = where_32; break;
    default: fn = where_64; break;
    }
    kiln__view v[4] = {op->out[0], op->in[0], op->in[1], op->in[2]};
    kiln__cpu_foreach(4, v, fn, NULL, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

void kiln__cpu_register_elementwise(kiln__kernel_fn *table) {
    kiln__cpu_register_unary(table);
    kiln__cpu_register_binary(table);
    kiln__cpu_register_special(table);
    table[KILN__OP_WHERE] = kernel_where;
}
