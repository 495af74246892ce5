/* examples/swish_op.h as a library of ops that a process loads at run time: Python's
 * kiln.ops.load_library (examples/python/custom_swish.py) or C's kiln_custom_op_load_library
 * calls its kiln_register_ops, which registers example_swish and example_swish_grad. Built
 * against kiln's headers without linking kiln (CMake target swish_ops: libswish_ops.so):
 *   cc -shared -fPIC -O2 -o libswish_ops.so examples/swish_ops.c -Iinclude -lm */
#include "swish_op.h"

kiln_status kiln_register_ops(void) { return swish_register() ? KILN_OK : kiln_last_status(); }
