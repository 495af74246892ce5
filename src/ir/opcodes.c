/* Opcode names, for error messages and the profiler, and the op table's, the reduction
 * table's, the row-op table's and the linear-algebra table's rows as data, and the shape
 * table's kernels: all generated from the tables (ir/opcodes.h, ir/optable.h,
 * ir/reduce_table.h, ir/row_table.h, ir/linalg_table.h, ir/shape_table.h). */
#include "ir/opcodes.h"

const char *kiln__opcode_name(kiln__opcode code) {
    static const char *const names[] = {
#define KILN__OPCODE_NAME(name, ...) #name,
        KILN__OPCODES(KILN__OPCODE_NAME)
#undef KILN__OPCODE_NAME
    };
    return (unsigned)code < KILN__OP_COUNT ? names[code] : "?";
}

const kiln__op_info kiln__op_infos[KILN__OP_COUNT] = {
#define KILN__OP_INFO_ROW(NAME, name_, arity_, dtype_, shape_, fuse_, grad_, sig_, cpu_, domain_, doc_) \
    [KILN__OP_##NAME] = {.name = #name_,                                                              \
                         .arity = arity_,                                                             \
                         .dtype = KILN__DT_##dtype_,                                                  \
                         .shape = KILN__SHAPE_##shape_,                                               \
                         .fuse = KILN__FUSE_##fuse_,                                                  \
                         .grad = KILN__GRAD_##grad_,                                                  \
                         .sig = KILN__SIG_##sig_,                                                     \
                         .cpu = KILN__CPU_##cpu_,                                                     \
                         .domain = KILN__DOMAIN_##domain_,                                            \
                         .doc = doc_},
    KILN__OPTABLE(KILN__OP_INFO_ROW)
#undef KILN__OP_INFO_ROW
};

/* The reduction table's rows; the py column is the Python binding's (scripts/gen_optable.py). */
const kiln__reduce_info kiln__reduce_rows[KILN__RED_COUNT] = {
#define KILN__REDUCE_ROW(NAME, name_, code_, dtype_, sig_, grad_, fold_, finish_, fuse_, doc_) \
    [KILN__RED_##NAME] = {.name = #name_,                                                \
                          .code = code_,                                                 \
                          .dtype = KILN__RDT_##dtype_,                                   \
                          .sig = KILN__RSIG_##sig_,                                      \
                          .grad = KILN__RGRAD_##grad_,                                   \
                          .fold = KILN__RFOLD_##fold_,                                   \
                          .finish = KILN__RFIN_##finish_,                                \
                          .fuse = KILN__RFUSE_##fuse_,                                   \
                          .doc = doc_},
#define KILN__REDUCE_KERNEL_ROW(NAME, name_, dtype_, sig_, grad_, fold_, finish_, fuse_, py_, doc_) \
    KILN__REDUCE_ROW(NAME, name_, KILN__OP_##NAME, dtype_, sig_, grad_, fold_, finish_, fuse_, doc_)
#define KILN__REDUCE_COMPOSED_ROW(NAME, name_, dtype_, sig_, grad_, fold_, finish_, fuse_, py_, doc_) \
    KILN__REDUCE_ROW(NAME, name_, -1, dtype_, sig_, grad_, fold_, finish_, fuse_, doc_)
    KILN__REDUCE_KERNELS(KILN__REDUCE_KERNEL_ROW) KILN__REDUCE_COMPOSED(KILN__REDUCE_COMPOSED_ROW)
#undef KILN__REDUCE_KERNEL_ROW
#undef KILN__REDUCE_COMPOSED_ROW
#undef KILN__REDUCE_ROW
};

/* The row-op table's rows. */
const kiln__row_info kiln__row_rows[KILN__ROW_COUNT] = {
#define KILN__ROW_DATA(NAME, name_, code_, arity_, dims_, args_, ex_, dtype_, shape_, grad_, domain_, tol_, py_, doc_) \
    [KILN__ROW_##NAME] = {.name = #name_,                                                                          \
                          .code = code_,                                                                           \
                          .arity = arity_,                                                                         \
                          .dims = KILN__RDIMS_##dims_,                                                             \
                          .args = #args_,                                                                          \
                          .ex = KILN__ROWEX_##ex_,                                                                 \
                          .dtype = KILN__ROWDT_##dtype_,                                                           \
                          .shape = KILN__ROWSHAPE_##shape_,                                                        \
                          .grad = KILN__ROWGRAD_##grad_,                                                           \
                          .domain = KILN__ROWDOM_##domain_,                                                        \
                          .tol = tol_,                                                                             \
                          .py = #py_,                                                                              \
                          .doc = doc_},
#define KILN__ROW_KERNEL_DATA(NAME, name_, ...) KILN__ROW_DATA(NAME, name_, KILN__OP_##NAME, __VA_ARGS__)
#define KILN__ROW_COMPOSED_DATA(NAME, name_, ...) KILN__ROW_DATA(NAME, name_, -1, __VA_ARGS__)
    KILN__ROW_KERNELS(KILN__ROW_KERNEL_DATA) KILN__ROW_COMPOSED(KILN__ROW_COMPOSED_DATA)
#undef KILN__ROW_KERNEL_DATA
#undef KILN__ROW_COMPOSED_DATA
#undef KILN__ROW_DATA
};

/* A row's kernel column as an opcode: a name of the table's kernel list (a compile error for
 * one that is not), OPS (a composition) -1, NONE (a view) -2. */
enum {
    KILN__LKERNEL_OPS = -1,
#define KILN__LKERNEL(NAME, ...) KILN__LKERNEL_##NAME = KILN__OP_##NAME,
    KILN__LINALG_KERNELS(KILN__LKERNEL)
#undef KILN__LKERNEL
};
enum {
    KILN__SKERNEL_NONE = -2,
    KILN__SKERNEL_OPS = -1,
#define KILN__SKERNEL(NAME, ...) KILN__SKERNEL_##NAME = KILN__OP_##NAME,
    KILN__SHAPE_KERNELS(KILN__SKERNEL)
#undef KILN__SKERNEL
};

/* The linear-algebra table's rows. */
const kiln__linalg_info kiln__linalg_rows[KILN__LINALG_COUNT] = {
#define KILN__LINALG_DATA(NAME, name_, arity_, sig_, args_, dtype_, shape_, kernel_, grad_, tol_, layer_, py_, doc_) \
    [KILN__LINALG_##NAME] = {.name = #name_,                                                          \
                             .arity = arity_,                                                         \
                             .sig = KILN__LSIG_##sig_,                                                \
                             .args = #args_,                                                          \
                             .dtype = KILN__LDT_##dtype_,                                             \
                             .shape = KILN__LSHAPE_##shape_,                                          \
                             .kernel = KILN__LKERNEL_##kernel_,                                       \
                             .grad = KILN__LGRAD_##grad_,                                             \
                             .tol = tol_,                                                             \
                             .layer = KILN__LLAYER_##layer_,                                          \
                             .py = KILN__LPY_##py_,                                                   \
                             .doc = doc_},
    KILN__LINALG_TABLE(KILN__LINALG_DATA)
#undef KILN__LINALG_DATA
};

const int kiln__shape_kernels[KILN__SHAPE_COUNT] = {
#define KILN__SHAPE_KERNEL_OF(NAME, name_, sig_, args_, arity_, dtype_, shape_, kernel_, ...) \
    [KILN__SHAPE_##NAME] = KILN__SKERNEL_##kernel_,
    KILN__SHAPE_TABLE(KILN__SHAPE_KERNEL_OF)
#undef KILN__SHAPE_KERNEL_OF
};
