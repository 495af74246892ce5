/* The backend registry (backend/registry.c): one registration per kind of KILN_DEVICE_KINDS,
 * device counts, names and descriptions through it, supports_op, and the kinds without
 * devices (CUDA, OpenCL in a build without it) and invalid kinds failing cleanly. */
#include <string.h>

#include "backend/backend-impl.h"
#include "kiln/tensor.h"
#include "kiln_test.h"

KT_TEST(every_kind_is_registered_under_its_name) {
    for (int k = 0; k < KILN_KIND_COUNT; k++) {
        const kiln__backend_reg *r = kiln__backend_reg_get((kiln_device_kind)k);
        KT_CHECK_MSG(r && r->kind == (kiln_device_kind)k && r->device_count, "kind %d", k);
        if (!r) continue;
        /* the kind's name is how kiln_device_name starts for its device 0 */
        const char *dev0 = kiln_device_name((kiln_device)(k << 8));
        KT_CHECK_MSG(strncmp(dev0, r->name, strlen(r->name)) == 0, "%s vs %s", dev0, r->name);
        kiln_device parsed;
        KT_CHECK(kiln_device_parse(r->name, &parsed) == KILN_OK && parsed == (kiln_device)(k << 8));
        KT_CHECK(kiln_device_count((kiln_device_kind)k) == r->device_count());
    }
    KT_CHECK(kiln__backend_reg_get(KILN_KIND_COUNT) == NULL && kiln__backend_reg_get((kiln_device_kind)-1) == NULL);
}

KT_TEST(the_cpu_has_one_device_with_a_description) {
    KT_CHECK(kiln_device_count(KILN_KIND_CPU) == 1);
    kiln_device_info info;
    KT_CHECK(kiln_device_info_get(KILN_CPU, &info) == KILN_OK && strcmp(info.name, "cpu") == 0);
    KT_CHECK(info.compute_units >= 1 && info.global_memory > 0 && info.device == KILN_CPU);
    KT_CHECK(kiln__backend_get(KILN_CPU) == kiln__cpu_backend());
}

KT_TEST(a_kind_without_devices_and_invalid_devices_fail_cleanly) {
    KT_CHECK(kiln_device_count(KILN_KIND_CUDA) == 0);
    KT_CHECK(kiln__backend_get(KILN_CUDA) == NULL);
    kiln_device_info info;
    KT_CHECK(kiln_device_info_get(KILN_CUDA, &info) == KILN_ERR_DEVICE && strstr(kiln_last_error(), "cuda"));
    KT_CHECK(kiln_device_info_get(KILN_DEVICE_COUNT, &info) == KILN_ERR_DEVICE);
    KT_CHECK(kiln_device_info_get((kiln_device)(1 | KILN_CPU), &info) == KILN_ERR_DEVICE);
    KT_CHECK(kiln_device_info_get(KILN_CPU, NULL) == KILN_ERR_NULL);
    KT_CHECK(kiln_device_count(KILN_KIND_COUNT) == 0 && kiln_device_count((kiln_device_kind)-3) == 0);
    KT_CHECK(kiln__backend_get((kiln_device)(KILN_OPENCL | KILN_MAX_DEVICES)) == NULL);
    KT_CHECK(kiln__backend_get((kiln_device)-1) == NULL);
    /* an op on a device of a kind without devices is an error naming the op, not a crash */
    kiln_tensor t = kiln_zeros(KILN_CUDA, KILN_F32, KILN_SHAPE(2));
    float v[2];
    KT_CHECK(kiln_into_data(t, v, sizeof v) == KILN_ERR_DEVICE && strstr(kiln_last_error(), "kiln_zeros"));
}

KT_TEST(supports_op_is_a_kernel_or_the_backends_own_answer) {
    const kiln__backend *cpu = kiln__cpu_backend();
    kiln__op op = {.code = KILN__OP_EXP};
    KT_CHECK(kiln__backend_supports(cpu, &op));
    op.code = KILN__OP_COUNT;
    KT_CHECK(!kiln__backend_supports(cpu, &op));
    op.code = KILN__OP_EXP;
    KT_CHECK(!kiln__backend_supports(NULL, &op));
    /* a registry that knows no backend by name: every other kind's devices, opened */
    for (int k = 1; k < KILN_KIND_COUNT; k++)
        for (int i = 0; i < kiln_device_count((kiln_device_kind)k); i++) {
            const kiln__backend *be = kiln__backend_get((kiln_device)(k << 8 | i));
            KT_CHECK_MSG(be && be->device == (kiln_device)(k << 8 | i) && be->kernels[KILN__OP_COPY],
                         "%s", kiln_device_name((kiln_device)(k << 8 | i)));
        }
}

int main(void) {
    KT_RUN(every_kind_is_registered_under_its_name);
    KT_RUN(the_cpu_has_one_device_with_a_description);
    KT_RUN(a_kind_without_devices_and_invalid_devices_fail_cleanly);
    KT_RUN(supports_op_is_a_kernel_or_the_backends_own_answer);
    return kt_finish();
}
