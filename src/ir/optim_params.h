/* The fused optimizer updates' parameter structs and their packing into an op record, expanded
 * from the optimizer-update table (ir/optim_table.h): the one encoding that ops/optim_ops.c
 * writes and every backend's update kernels read.
 *
 *   kiln__op op;                                   // ops/: after kiln__op_init
 *   kiln__adam_update_encode(&op, &u);
 *   kiln__adam_update d = kiln__adam_update_decode(&op);   // a kernel: d equals u
 *
 * Per row: typedef struct { its fields (doubles and bools) in the table's order; bool tentative; }
 * kiln__name, kiln__name_encode(op, &u) and kiln__name_decode(op). A decoded struct round-trips
 * exactly: kernels read the caller's doubles bit for bit. */
#ifndef KILN_IR_OPTIM_PARAMS_H
#define KILN_IR_OPTIM_PARAMS_H

#include <string.h>

#include "ir/op.h"
#include "ir/optim_table.h"

static inline int64_t kiln__optim_f64_bits(double v) {
    int64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

static inline double kiln__optim_f64_of_bits(int64_t bits) {
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static inline bool kiln__optim_flag(const kiln__op *op, int64_t flag) { return (op->pi[KILN__OPTIM_PI_FLAGS] & flag) != 0; }

/* A field's C type, how it is written, and how it is read, by its encoding. */
#define KILN__OPTIM_TYPE_F double
#define KILN__OPTIM_TYPE_BITS double
#define KILN__OPTIM_TYPE_FLAG bool
#define KILN__OPTIM_PUT_F(op, v, at) (op)->p.f[at] = (v)
#define KILN__OPTIM_PUT_BITS(op, v, at) (op)->pi[at] = kiln__optim_f64_bits(v)
#define KILN__OPTIM_PUT_FLAG(op, v, at) (op)->pi[KILN__OPTIM_PI_FLAGS] |= (v) ? KILN__OPTIM_FLAG_##at : 0
#define KILN__OPTIM_GET_F(op, at) (op)->p.f[at]
#define KILN__OPTIM_GET_BITS(op, at) kiln__optim_f64_of_bits((op)->pi[at])
#define KILN__OPTIM_GET_FLAG(op, at) kiln__optim_flag(op, KILN__OPTIM_FLAG_##at)

#define KILN__OPTIM_DECL(field, enc, at) KILN__OPTIM_TYPE_##enc field;
#define KILN__OPTIM_PUT(field, enc, at) KILN__OPTIM_PUT_##enc(op, u->field, at);
#define KILN__OPTIM_GET(field, enc, at) .field = KILN__OPTIM_GET_##enc(op, at),
#define KILN__OPTIM_CODEC(NAME, name, ...)                                                        \
    typedef struct {                                                                              \
        KILN__OPTIM_FIELDS_##NAME(KILN__OPTIM_DECL) bool tentative;                               \
    } kiln__##name;                                                                               \
    static inline void kiln__##name##_encode(kiln__op *op, const kiln__##name *u) {               \
        op->pi[KILN__OPTIM_PI_FLAGS] = 0;                                                         \
        KILN__OPTIM_FIELDS_##NAME(KILN__OPTIM_PUT)                                                \
        if (!u->tentative) op->flags |= KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR;                      \
    }                                                                                             \
    static inline kiln__##name kiln__##name##_decode(const kiln__op *op) {                        \
        return (kiln__##name){KILN__OPTIM_FIELDS_##NAME(KILN__OPTIM_GET)                          \
                              .tentative = !(op->flags & KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR)};   \
    }
KILN__OPTIM_TABLE(KILN__OPTIM_CODEC)
#undef KILN__OPTIM_CODEC
#undef KILN__OPTIM_GET
#undef KILN__OPTIM_PUT
#undef KILN__OPTIM_DECL

/* Encodes u (the row's struct for op->code) into op: false for an opcode outside the table. */
static inline bool kiln__optim_encode(kiln__op *op, const void *u) {
    switch ((int)op->code) {
#define KILN__OPTIM_ENCODE_CASE(NAME, name, ...) \
    case KILN__OP_##NAME: kiln__##name##_encode(op, (const kiln__##name *)u); return true;
        KILN__OPTIM_TABLE(KILN__OPTIM_ENCODE_CASE)
#undef KILN__OPTIM_ENCODE_CASE
    default: return false;
    }
}

#endif
