/* Backend registry and kernel error details. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend-impl.h"


static _Thread_local char kernel_error[256];

void kiln__kernel_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kernel_error, sizeof kernel_error, fmt, ap);
    va_end(ap);
}

const char *kiln__kernel_error_detail(void) { return kernel_error; }

static void (*_Atomic exit_hold)(void);

static void run_exit_hold(void) {
    void (*hold)(void) = atomic_load(&exit_hold);
    if (hold) hold();
}

void kiln__backend_set_exit_hold(void (*hold)(void)) { atomic_store(&exit_hold, hold); }

void kiln__backend_exit_hold_register(void) {
    if (atomic_load(&exit_hold)) atexit(run_exit_hold);
}

_Thread_local bool kiln__kernel_timing;
_Thread_local kiln__device_probe kiln__kernel_probe;

const kiln__backend *kiln__backend_get(kiln_device dev) {
    if (dev == KILN_CPU) return kiln__cpu_backend();
    if (kiln_device_kind(dev) == KILN_KIND_OPENCL && kiln__device_slot(dev) >= 0)
        return kiln__opencl_backend(kiln_device_index(dev));
    return NULL; /* CUDA arrives with its backend */
}

kiln_status kiln__backends_synchronize(void) { return kiln__opencl_synchronize_all(); }

void kiln__backends_stream_end(int stream_id) { kiln__opencl_stream_end(stream_id); }

int kiln_device_count(kiln_device_kind kind) {
    switch (kind) {
    case KILN_KIND_CPU: return 1;
    case KILN_KIND_OPENCL: return kiln__opencl_device_count();
    default: return 0;
    }
}

kiln_status kiln_device_info_get(kiln_device dev, kiln_device_info *info) {
    if (!info) return kiln__report(KILN_ERR_NULL, "kiln_device_info_get", "info is NULL");
    memset(info, 0, sizeof *info);
    info->device = dev;
    if (dev == KILN_CPU) {
        snprintf(info->name, sizeof info->name, "cpu");
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        info->global_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
        info->compute_units = (int)sysconf(_SC_NPROCESSORS_ONLN);
        return KILN_OK;
    }
    kiln__device_desc d;
    if (kiln_device_kind(dev) != KILN_KIND_OPENCL || kiln__device_slot(dev) < 0 ||
        !kiln__opencl_describe(kiln_device_index(dev), &d))
        return kiln__report(KILN_ERR_DEVICE, "kiln_device_info_get", "device %s is not available", kiln_device_name(dev));
    memcpy(info->name, d.name, sizeof info->name);
    memcpy(info->driver, d.driver, sizeof info->driver);
    info->global_memory = d.global_memory;
    info->compute_units = d.compute_units;
    return KILN_OK;
}
