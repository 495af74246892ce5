/* Libraries of users' ops loaded at run time (kiln_custom_op_load_library): the example swish
 * library (examples/swish_ops.c, built without kiln) registers through its kiln_register_ops and
 * its op runs and differentiates here, loading it again does nothing, and bad paths, a file that
 * is no library and a library that brought its own copy of kiln are refused at the caller's line.
 * The library paths come from CMake; skipped (exit 77) in a build without the examples. */
#include <kiln.h>
#include <math.h>

#include "kiln_test.h"

#ifdef SWISH_OPS_LIB
KT_TEST(library_registers_its_ops_once) {
    kt_mem_begin();
    KT_CHECK_MSG(kiln_custom_op_load_library(SWISH_OPS_LIB) == KILN_OK, "%s", kiln_last_error());
    kiln_custom_op *swish = kiln_custom_op_find("example_swish");
    KT_CHECK(swish != NULL && kiln_custom_op_find("example_swish_grad") != NULL);
    /* again: its entry point would fail on the taken names if it ran twice */
    KT_CHECK_MSG(kiln_custom_op_load_library(SWISH_OPS_LIB) == KILN_OK, "%s", kiln_last_error());
    KT_CHECK(kiln_custom_op_find("example_swish") == swish);

    double xs[6] = {-5, -1.5, -0.25, 0, 0.75, 4}, y[6], g[6];
    kiln_tensor x = kiln_leaf(kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(6), xs), KILN_F32));
    kiln_tensor out = kiln_custom_op_call(swish, 1, (kiln_tensor[]){kiln_ref(x)});
    kiln_grads *grads = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_ref(out)), &grads) == KILN_OK, "%s", kiln_last_error());
    KT_CHECK(kiln_into_data(kiln_cast(out, KILN_F64), y, sizeof y) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_cast(kiln_grad(grads, x), KILN_F64), g, sizeof g) == KILN_OK);
    for (int i = 0; i < 6; i++) {
        double s = 1 / (1 + exp(-xs[i]));
        KT_NEAR(y[i], xs[i] * s, 1e-6);
        KT_NEAR(g[i], s * (1 + xs[i] * (1 - s)), 1e-6);
    }
    kiln_grads_free(grads);
    kiln_release(x);
    KT_MEM_CHECK();
}

KT_TEST(library_with_its_own_kiln_is_refused) {
    int line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_load_library(OWN_KILN_LIB) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "its own copy of kiln", line);
    KT_CHECK(kiln_custom_op_find("example_swish_own") == NULL);
}
#endif

KT_TEST(bad_paths_are_refused) {
    int line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_load_library(NULL) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "non-empty", line);
    KT_CHECK(kiln_custom_op_load_library("") == KILN_ERR_INVALID_ARGUMENT);
    line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_load_library("/no/such/libops.so") == KILN_ERR_IO);
    KT_EXPECT_ERROR(KILN_ERR_IO, "/no/such/libops.so", line);
    line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_load_library(__FILE__) == KILN_ERR_IO); /* not a shared library */
    KT_EXPECT_ERROR(KILN_ERR_IO, "cannot load", line);
}

int main(void) {
    KT_RUN(bad_paths_are_refused);
#ifdef SWISH_OPS_LIB
    KT_RUN(library_registers_its_ops_once);
    KT_RUN(library_with_its_own_kiln_is_refused);
    return kt_finish();
#else
    kt_finish();
    printf("built without the examples (no swish_ops library): skipped\n");
    return 77;
#endif
}
