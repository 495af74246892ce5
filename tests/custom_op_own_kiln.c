/* For test_custom_op_load: a library of ops that carries its own kiln_custom_op_register, as one
 * linked with its own copy of kiln does (a whole second kiln here would be an ODR violation that
 * AddressSanitizer stops the test for before kiln can refuse the library). */
#define KILN_NO_CALL_SITE_MACROS /* it defines kiln_custom_op_register itself */
#include <kiln.h>

kiln_status kiln_custom_op_register(const kiln_custom_op_def *def, kiln_custom_op **out) {
    (void)def, (void)out;
    return KILN_OK;
}

kiln_status kiln_register_ops(void) { return KILN_ERR_INTERNAL; /* never called: the library is refused */ }
