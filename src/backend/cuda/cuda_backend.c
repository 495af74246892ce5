/* The CUDA device kind's registration. kiln has no CUDA kernels yet, so the kind has no
 * devices: KILN_CUDA names a device that is never available, and every op on it fails with
 * KILN_ERR_DEVICE as on a machine without a GPU. The CUDA backend, when it is written, fills in
 * this registration (DESIGN.md, section 10) and nothing outside this folder changes but the
 * build. */
#include "backend/backend-impl.h"

static int cuda_device_count(void) { return 0; }

const kiln__backend_reg kiln__cuda_backend_reg = {
    .name = "cuda",
    .kind = KILN_KIND_CUDA,
    .device_count = cuda_device_count,
};
