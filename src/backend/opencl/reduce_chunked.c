/* A SUM or MEAN of a whole dense f32 tensor (one output) in two steps. reduce.c runs one work
 * item per output, so a loss like kiln_sum(y) over 32M elements was one item adding them one
 * by one (1.6 s per call on PoCL, half of bench_softmax --autodiff on the device). Here CHUNKS
 * items each add a contiguous chunk in sixteen lanes (float16 loads, double16 sums when the
 * device has doubles), into scratch from the caching allocator; one item then adds the chunks
 * in order. The chunking depends on the length alone, so a result repeats run to run; it
 * differs from the CPU's (which sums in another order) in rounding. */
#include <stdlib.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define CHUNKS 256
/* Shorter inputs keep reduce.c's kernel: a second launch and scratch cost more there. */
#define MIN_ELEMENTS ((int64_t)1 << 16)

static const char *const chunk_body =
    "__kernel void k(long n, long chunk, long io, __global const float *x, __global A *part) {\n"
    "  long c = get_global_id(0), lo = c * chunk, hi = min(lo + chunk, n), j = lo;\n"
    "  A16 acc16 = 0; A acc = 0;\n"
    "  for (; j + 16 <= hi; j += 16) acc16 += CONVERT16(vload16(0, x + io + j));\n"
    "  for (; j < hi; j++) acc += (A)x[io + j];\n"
    "  A8 h8 = acc16.lo + acc16.hi; A4 h4 = h8.lo + h8.hi; A2 h2 = h4.lo + h4.hi;\n"
    "  part[c] = h2.x + h2.y + acc;\n}\n"
    "__kernel void total(long n, long mean, long oo, __global const A *part, __global float *y) {\n"
    "  A acc = 0; for (int c = 0; c < CHUNKS; c++) acc += part[c];\n"
    "  y[oo] = mean ? (float)(acc / (A)n) : (float)acc;\n}\n";

bool kiln__opencl_sum_chunked_takes(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    const kiln__reduce_info *row = kiln__reduce_info_of(op->code); /* a SUM fold finishing as is or as a mean */
    return row->fold == KILN__RFOLD_SUM && (row->finish == KILN__RFIN_VALUE || row->finish == KILN__RFIN_MEAN) &&
           in->dtype == KILN_F32 &&
           out->dtype == KILN_F32 && kiln__view_numel(out) == 1 && kiln__view_numel(in) >= MIN_ELEMENTS &&
           kiln__view_is_contiguous(in);
}

/* Launches kernel `name` of program p over global items with args. */
static kiln_status run(kiln__opencl_device *d, const kiln__op *op, cl_program p, const char *name, size_t global,
                       const kiln__opencl_arg *args, int n_args) {
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(p, name, &err);
    if (!k) return kiln__opencl_fail(err, "clCreateKernel");
    for (int i = 0; i < n_args && err == CL_SUCCESS; i++) err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
    cl_event ev = NULL;
    if (err == CL_SUCCESS) err = clEnqueueNDRangeKernel(kiln__opencl_queue(d, op), k, 1, NULL, &global, NULL, 0, NULL, &ev);
    clReleaseKernel(k);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, "launching an OpenCL kernel");
    return kiln__opencl_done(d, ev, "an OpenCL reduction");
}

kiln_status kiln__opencl_sum_chunked(kiln__opencl_device *d, const kiln__op *op) {
    const char *A = d->fp64 ? "double" : "float";
    kiln__text src = {0};
    kiln__opencl_src_prelude(&src, d->fp64);
    kiln__text_printf(&src, "#define CHUNKS %d\ntypedef %s A;\ntypedef %s2 A2;\ntypedef %s4 A4;\ntypedef %s8 A8;\n"
                              "typedef %s16 A16;\n#define CONVERT16 convert_%s16\n%s",
                      CHUNKS, A, A, A, A, A, A, chunk_body);
    if (src.oom) {
        free(src.s);
        kiln__kernel_error("out of host memory generating an OpenCL kernel");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    cl_program p = kiln__opencl_program_get(d, src.s);
    free(src.s);
    if (!p) return KILN_ERR_KERNEL;
    size_t part_bytes = CHUNKS * (d->fp64 ? sizeof(cl_double) : sizeof(cl_float));
    kiln__storage *part = kiln__storage_new(d->device, part_bytes);
    if (!part) {
        kiln__kernel_error("out of device memory for the partial sums of %s", kiln__opcode_name(op->code));
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln__opencl_buf *pb = part->data;
    cl_long n = kiln__view_numel(&op->in[0]), chunk = (n + CHUNKS - 1) / CHUNKS, io = op->in[0].offset;
    cl_long mean = kiln__reduce_info_of(op->code)->finish == KILN__RFIN_MEAN, oo = op->out[0].offset;
    cl_mem x = kiln__opencl_mem(op->in[0].storage), y = kiln__opencl_mem(op->out[0].storage), pm = pb->mem;
    kiln_status st = kiln__opencl_scratch_begin(d, pb, kiln__opencl_queue(d, op));
    if (st == KILN_OK) {
        kiln__opencl_arg args[] = {{8, &n}, {8, &chunk}, {8, &io}, {sizeof x, &x}, {sizeof pm, &pm}};
        st = run(d, op, p, "k", CHUNKS, args, 5);
    }
    if (st == KILN_OK) {
        kiln__opencl_arg args[] = {{8, &n}, {8, &mean}, {8, &oo}, {sizeof pm, &pm}, {sizeof y, &y}};
        st = run(d, op, p, "total", 1, args, 5);
    }
    kiln__opencl_scratch_end(d, pb);
    kiln__storage_release(part);
    return st;
}

#endif
