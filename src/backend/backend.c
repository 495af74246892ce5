/* Backend registry and kernel error details. */
#include <stdarg.h>
#include <stdio.h>

#include "backend/backend-impl.h"


static _Thread_local char kernel_error[256];

void kiln__kernel_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kernel_error, sizeof kernel_error, fmt, ap);
    va_end(ap);
}

const char *kiln__kernel_error_detail(void) { return kernel_error; }

const kiln__backend *kiln__backend_get(kiln_device dev) {
    switch (dev) {
    case KILN_CPU: return kiln__cpu_backend();
    default: return NULL; /* CUDA arrives with its backend */
    }
}
