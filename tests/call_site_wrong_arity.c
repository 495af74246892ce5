/* Not a test program: test_call_site_arity.sh compiles this file with one KILN_WRONG_* defined
 * and expects the compiler's first error at the line marked for that case, in this file. */
#include <kiln.h>

kiln_status use_kiln(void);
kiln_status use_kiln(void) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
#if defined(KILN_WRONG_TOO_MANY)
    x = kiln_exp(x, 1); /* case TOO_MANY */
#elif defined(KILN_WRONG_TOO_FEW)
    x = kiln_add(x); /* case TOO_FEW */
#elif defined(KILN_WRONG_NONE_EXPECTED)
    kiln_sync(x); /* case NONE_EXPECTED */
#else
    x = kiln_exp(x);
#endif
    return kiln_release(x);
}
