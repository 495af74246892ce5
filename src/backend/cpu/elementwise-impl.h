/* Shared by the CPU elementwise kernel files (elementwise*.c). */
#ifndef KILN_BACKEND_CPU_ELEMENTWISE_IMPL_H
#define KILN_BACKEND_CPU_ELEMENTWISE_IMPL_H

#include "backend/cpu/cpu-impl.h"

/* Asserts that a loop has no dependence between iterations: in-place runs alias their output
 * and one input exactly, so restrict would be a lie, and without a hint gcc either versions
 * the loop on an overlap test (-O3) or gives up (-O2). clang versions it at -O2 already, and
 * its equivalent pragma warns about loops that cannot vectorise (libm calls). */
#if defined(__clang__)
#define KILN__SIMD
#elif defined(__GNUC__)
#define KILN__SIMD _Pragma("GCC ivdep")
#else
#define KILN__SIMD
#endif

/* Dense runs are split into a body whose trip count is a multiple of this and a scalar tail:
 * gcc's -O2 cost model vectorises only loops it can prove need no epilogue. */
#define KILN__EW_BLOCK ((int64_t)16)

/* Maps one element (x, and y for two inputs) to EXPR over a run of n, with a vectorisable
 * body for the dense cases (stride == element size; a stride-0 input is loaded once). */
#define KILN__EW_RUN1(n, o, os, a, as, T, U, EXPR)                                                     \
    do {                                                                                                \
        if ((os) == (int64_t)sizeof(U) && (as) == (int64_t)sizeof(T)) {                                 \
            U *o_ = (U *)(o);                                                                           \
            const T *a_ = (const T *)(a);                                                               \
            int64_t m_ = (n) & ~(KILN__EW_BLOCK - 1);                                                   \
            KILN__SIMD for (int64_t i_ = 0; i_ < m_; i_++) {                                            \
                T x = a_[i_];                                                                           \
                o_[i_] = (U)(EXPR);                                                                     \
            }                                                                                           \
            for (int64_t i_ = m_; i_ < (n); i_++) {                                                     \
                T x = a_[i_];                                                                           \
                o_[i_] = (U)(EXPR);                                                                     \
            }                                                                                           \
        } else {                                                                                        \
            for (int64_t i_ = 0; i_ < (n); i_++) {                                                      \
                T x = *(const T *)((a) + i_ * (as));                                                    \
                *(U *)((o) + i_ * (os)) = (U)(EXPR);                                                    \
            }                                                                                           \
        }                                                                                               \
    } while (0)

#define KILN__EW_BODY2(n, o_at, x_at, y_at, T, U, EXPR)                                                 \
    do {                                                                                                \
        int64_t m_ = (n) & ~(KILN__EW_BLOCK - 1);                                                       \
        KILN__SIMD for (int64_t i_ = 0; i_ < m_; i_++) {                                                \
            T x = x_at, y = y_at;                                                                       \
            o_at = (U)(EXPR);                                                                           \
        }                                                                                               \
        for (int64_t i_ = m_; i_ < (n); i_++) {                                                         \
            T x = x_at, y = y_at;                                                                       \
            o_at = (U)(EXPR);                                                                           \
        }                                                                                               \
    } while (0)

#define KILN__EW_RUN2(n, p, st, T, U, EXPR)                                                             \
    do {                                                                                                \
        const int64_t te_ = (int64_t)sizeof(T);                                                         \
        U *o_ = (U *)(p)[0];                                                                            \
        const T *a_ = (const T *)(p)[1], *b_ = (const T *)(p)[2];                                       \
        if ((st)[0] != (int64_t)sizeof(U)) {                                                            \
            for (int64_t i_ = 0; i_ < (n); i_++) {                                                      \
                T x = *(const T *)((p)[1] + i_ * (st)[1]), y = *(const T *)((p)[2] + i_ * (st)[2]);      \
                *(U *)((p)[0] + i_ * (st)[0]) = (U)(EXPR);                                              \
            }                                                                                           \
        } else if ((st)[1] == te_ && (st)[2] == te_) {                                                  \
            KILN__EW_BODY2(n, o_[i_], a_[i_], b_[i_], T, U, EXPR);                                      \
        } else if ((st)[1] == te_ && (st)[2] == 0) {                                                    \
            const T yv_ = *b_;                                                                          \
            KILN__EW_BODY2(n, o_[i_], a_[i_], yv_, T, U, EXPR);                                         \
        } else if ((st)[1] == 0 && (st)[2] == te_) {                                                    \
            const T xv_ = *a_;                                                                          \
            KILN__EW_BODY2(n, o_[i_], xv_, b_[i_], T, U, EXPR);                                         \
        } else {                                                                                        \
            for (int64_t i_ = 0; i_ < (n); i_++) {                                                      \
                T x = *(const T *)((p)[1] + i_ * (st)[1]), y = *(const T *)((p)[2] + i_ * (st)[2]);      \
                o_[i_] = (U)(EXPR);                                                                     \
            }                                                                                           \
        }                                                                                               \
    } while (0)

/* Records "<kernel> has no <dtype> version" and returns the status for it. */
kiln_status kiln__ew_bad_dtype(const kiln__op *op, kiln_dtype dtype);

/* The loops of each family (see kiln__ew_loop_find): false when its kernel refuses the dtypes
 * or does not handle code. */
bool kiln__ew_unary_loop(kiln__opcode code, kiln_dtype in, kiln_dtype out, const double *param, kiln__ew_loop *l);
bool kiln__ew_binary_loop(kiln__opcode code, kiln_dtype in, kiln_dtype out, kiln__ew_loop *l);
bool kiln__ew_special_loop(kiln__opcode code, kiln_dtype in, kiln_dtype out, const double *param, kiln__ew_loop *l);

/* The AVX2 loop of code for dt (elementwise_avx2.c), NULL when there is none or the CPU or
 * KILN_ISA says no; it gives the portable loop's bits. */
kiln__loop_fn kiln__ew_avx2_loop(kiln__opcode code, kiln_dtype dt);

/* The bf16 loop of code as stored (elementwise_lowp.c: RELU, RELU_BACKWARD), else NULL. */
kiln__loop_fn kiln__ew_bf16_loop(kiln__opcode code);

void kiln__cpu_register_unary(kiln__kernel_fn *table);
void kiln__cpu_register_binary(kiln__kernel_fn *table);
void kiln__cpu_register_special(kiln__kernel_fn *table); /* elementwise_special.c */

#endif
