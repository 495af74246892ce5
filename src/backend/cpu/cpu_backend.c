/* The CPU backend's vtable and registration. Kernel families register themselves into one
 * table. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu-impl.h"
#include "core/machine.h"

static kiln_status cpu_copy_to_host(void *ctx, void *dst, const kiln__storage *src, size_t offset, size_t nbytes) {
    if (nbytes) memcpy(dst, (const char *)src->data + offset, nbytes);
    return KILN_OK;
}
static kiln_status cpu_copy_from_host(void *ctx, kiln__storage *dst, size_t offset, const void *src, size_t nbytes) {
    if (nbytes) memcpy((char *)dst->data + offset, src, nbytes);
    return KILN_OK;
}
static kiln_status cpu_synchronize(void *ctx) { return KILN_OK; }

static kiln__backend cpu = {
    .name = "cpu",
    .device = KILN_CPU,
    .copy_to_host = cpu_copy_to_host,
    .copy_from_host = cpu_copy_from_host,
    .synchronize = cpu_synchronize,
};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_init(void) {
    kiln__cpu_register_copy(cpu.kernels);
    kiln__cpu_register_elementwise(cpu.kernels);
    kiln__cpu_register_reduce(cpu.kernels);
    kiln__cpu_register_linalg(cpu.kernels);
    kiln__cpu_register_index(cpu.kernels);
    kiln__cpu_register_random(cpu.kernels);
    kiln__cpu_register_optim(cpu.kernels);
    kiln__cpu_register_nn(cpu.kernels);
    kiln__cpu_register_scan(cpu.kernels);
    kiln__cpu_register_sort(cpu.kernels);
    kiln__cpu_register_attention(cpu.kernels);
    kiln__cpu_register_fused(cpu.kernels);
    kiln__cpu_register_optim_adaptive(cpu.kernels);
    kiln__cpu_register_custom(cpu.kernels);
    kiln__openblas_stop_helpers();
}

const kiln__backend *kiln__cpu_backend(void) {
    pthread_once(&cpu_once, cpu_init);
    return &cpu;
}

static int cpu_device_count(void) { return 1; }
static const kiln__backend *cpu_device(int index) { return index == 0 ? kiln__cpu_backend() : NULL; }

static bool cpu_describe(int index, kiln__device_desc *out) {
    if (index != 0) return false;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "cpu");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->global_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    out->compute_units = kiln__machine_facts()->cores;
    return true;
}

const kiln__backend_reg kiln__cpu_backend_reg = {
    .name = "cpu",
    .kind = KILN_KIND_CPU,
    .device_count = cpu_device_count,
    .device = cpu_device,
    .describe = cpu_describe,
};

int kiln_num_threads(void) { return kiln__pool_threads(); }
void kiln_set_num_threads(int n) {
    if (n < 1) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_set_num_threads", "thread count %d must be >= 1", n);
        return;
    }
    kiln__pool_set_threads(n);
}
