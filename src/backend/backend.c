/* What the engine asks of the backends, through the registry (registry.c; no backend is named
 * here): a device's vtable, every backend's synchronize and stream end, device counts and
 * descriptions; plus kernel error details and the exit hold. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

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
    if (kiln__device_slot(dev) < 0) return NULL;
    const kiln__backend_reg *r = kiln__backend_regs[kiln_device_kind(dev)];
    return r && r->device ? r->device(kiln_device_index(dev)) : NULL;
}

bool kiln__backend_supports(const kiln__backend *be, const kiln__op *op) {
    if (!be || (unsigned)op->code >= KILN__OP_COUNT || !be->kernels[op->code]) return false;
    return !be->supports_op || be->supports_op(be->context, op);
}

kiln_status kiln__backends_synchronize(void) {
    kiln_status first = KILN_OK;
    for (int k = 0; k < KILN_KIND_COUNT; k++) {
        const kiln__backend_reg *r = kiln__backend_regs[k];
        kiln_status st = r && r->synchronize_all ? r->synchronize_all() : KILN_OK;
        if (first == KILN_OK) first = st;
    }
    return first;
}

void kiln__backends_stream_end(int stream_id) {
    for (int k = 0; k < KILN_KIND_COUNT; k++) {
        const kiln__backend_reg *r = kiln__backend_regs[k];
        if (r && r->stream_end) r->stream_end(stream_id);
    }
}

void kiln__backends_quiesce(uint64_t deadline_ns) {
    for (int k = 0; k < KILN_KIND_COUNT; k++) {
        const kiln__backend_reg *r = kiln__backend_regs[k];
        if (r && r->quiesce) r->quiesce(deadline_ns);
    }
}

int kiln_device_count(kiln_device_kind kind) {
    const kiln__backend_reg *r = kiln__backend_reg_get(kind);
    return r && r->device_count ? r->device_count() : 0;
}

kiln_status kiln_device_info_get(kiln_device dev, kiln_device_info *info) {
    if (!info) return kiln__report(KILN_ERR_NULL, "kiln_device_info_get", "info is NULL");
    memset(info, 0, sizeof *info);
    info->device = dev;
    const kiln__backend_reg *r = kiln__device_slot(dev) >= 0 ? kiln__backend_reg_get(kiln_device_kind(dev)) : NULL;
    kiln__device_desc d;
    if (!r || !r->describe || !r->describe(kiln_device_index(dev), &d))
        return kiln__report(KILN_ERR_DEVICE, "kiln_device_info_get", "device %s is not available", kiln_device_name(dev));
    memcpy(info->name, d.name, sizeof info->name);
    memcpy(info->driver, d.driver, sizeof info->driver);
    info->global_memory = d.global_memory;
    info->compute_units = d.compute_units;
    return KILN_OK;
}
