/* A library of users' ops for test_custom_ops.py, built by the test with the C compiler against
 * kiln.get_include() and examples/swish_op.h, without linking kiln. Its kiln_register_ops
 * registers the example swish, an op whose kernel fails and an op whose kernel waits for a gate
 * the test opens (to see that a call returns before its kernel runs); a constructor registers
 * one more, and register_late() (called through ctypes) another, as C code in the process may
 * at any time. Built with -DFAILING_ENTRY, its kiln_register_ops fails instead. */
#include <stdatomic.h>
#include <time.h>

#include "swish_op.h"

#define EXPORT __attribute__((visibility("default")))

static kiln_status same_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    *out = in[0];
    return KILN_OK;
}

static kiln_status failing_kernel(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                  void *user) {
    (void)n, (void)in, (void)out, (void)threads, (void)user;
    return kiln_custom_op_error("the kernel refused its input");
}

/* y = 2 x for dense f32 x */
static kiln_status twice_kernel(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                void *user) {
    (void)n, (void)threads, (void)user;
    int64_t count = 1;
    for (int d = 0; d < out->ndim; d++) count *= out->shape[d];
    for (int64_t i = 0; i < count; i++) ((float *)out->data)[i] = 2 * swish_at(&in[0], i);
    return KILN_OK;
}

static atomic_int gate_open;

EXPORT void open_gate(void) { atomic_store(&gate_open, 1); }

/* twice, once the test opened the gate (or failing after 20 s, so a broken test cannot hang) */
static kiln_status gated_kernel(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                void *user) {
    for (int waited_ms = 0; !atomic_load(&gate_open); waited_ms++) {
        if (waited_ms > 20000) return kiln_custom_op_error("the gate was never opened");
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return twice_kernel(n, in, out, threads, user);
}

static kiln_status add(const char *name, kiln_custom_kernel_fn kernel) {
    kiln_custom_op *op;
    kiln_custom_op_def def = {.name = name, .n_inputs = 1, .shape = same_shape, .cpu_kernel = kernel};
    return kiln_custom_op_register(&def, &op);
}

EXPORT kiln_status register_late(void) { return add("test_late", twice_kernel); }

__attribute__((constructor)) static void register_at_load(void) { add("test_from_constructor", twice_kernel); }

kiln_status kiln_register_ops(void) {
#ifdef FAILING_ENTRY
    return add("", twice_kernel); /* refused: an op needs a name */
#else
    kiln_status st = swish_register() ? KILN_OK : kiln_last_status();
    if (st == KILN_OK) st = add("test_fails", failing_kernel);
    if (st == KILN_OK) st = add("test_gated", gated_kernel);
    return st;
#endif
}
