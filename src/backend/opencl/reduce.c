/* OpenCL reductions (sum, mean, max, min over any dims) and softmax / log_softmax over one dim:
 * generated kernels, one work item per output element walking its reduced elements. */
#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

void kiln__cl_register_reduce(kiln__kernel_fn *table) { (void)table; }

#endif
