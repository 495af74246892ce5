/* Ends one expansion of the op table's expressions (ir/optable.h, KILN__OPEXPR): undefines the
 * whole vocabulary, so the next consumer (another domain: vectors, doubles, OpenCL text,
 * tensors) starts clean. Include it after each expansion; it has no include guard on purpose. */
#undef E_X
#undef E_Y
#undef E_G
#undef E_K
#undef E_ADD
#undef E_SUB
#undef E_MUL
#undef E_DIV
#undef E_NEG
#undef E_ABS
#undef E_EXP
#undef E_TANH
#undef E_SIGMOID
#undef E_MIN
#undef E_MAX
#undef E_LT
#undef E_GT
#undef E_LE
#undef E_GE
#undef E_AND
#undef E_WHERE
#undef E_CALL
