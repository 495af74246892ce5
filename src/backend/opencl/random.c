/* OpenCL random kernels: RAND_UNIFORM, RAND_NORMAL, RAND_BERNOULLI on the CPU's Philox4x32-10
 * counter layout (src/backend/cpu/philox.h): element i takes counter offset + i, f32 draws one
 * word per element (4 per block), f64 two. The float transforms are the CPU's own (its log and
 * sine/cosine polynomials, no contraction), so f32 values (and f16/bf16, rounded from them,
 * and f64 uniforms) equal the CPU's bit for bit; f64 normals use the device's libm and agree
 * to a few ulp. One work item per element. */
#include <math.h>
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

static const char *PHILOX =
    "inline uint4 philox(ulong block, ulong seed) {\n"
    "  uint x0 = (uint)block, x1 = (uint)(block >> 32), x2 = 0, x3 = 0, k0 = (uint)seed, k1 = (uint)(seed >> 32);\n"
    "  for (int r = 0; r < 10; r++) {\n"
    "    ulong p0 = (ulong)0xD2511F53u * x0, p1 = (ulong)0xCD9E8D57u * x2;\n"
    "    uint y0 = (uint)(p1 >> 32) ^ x1 ^ k0, y2 = (uint)(p0 >> 32) ^ x3 ^ k1;\n"
    "    x0 = y0; x1 = (uint)p1; x2 = y2; x3 = (uint)p0; k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }\n"
    "  return (uint4)(x0, x1, x2, x3); }\n"
    "inline uint word(uint4 w, int i) { return i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w; }\n"
    "inline float unit_f32(uint w) { return (float)(int)(w >> 8) * 0x1.0p-24f; }\n"
    "inline float unit_open_f32(uint w) { return (float)(int)((w >> 8) + 1) * 0x1.0p-24f; }\n"
    "inline float neg2log(float u) {\n"
    "  uint bits = as_uint(u), mantissa = bits & 0x7fffffu; int exponent = (int)(bits >> 23) - 127;\n"
    "  int above = mantissa > 0x3504f3u; float m = as_float(mantissa | (0x3f800000u - ((uint)above << 23)));\n"
    "  exponent += above; float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;\n"
    "  float series = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));\n"
    "  float e = (float)exponent; float ln_u = e * 0.693145752f + (e * 1.42860677e-06f + 2.0f * s * series);\n"
    "  return -2.0f * ln_u; }\n"
    "inline float2 sincos_turn(float t) {\n"
    "  int quarter = (int)(4.0f * t + 0.5f); float x = (t - 0.25f * (float)quarter) * 6.28318531f, x2 = x * x;\n"
    "  float s = x * (1.0f + x2 * (-1.0f / 6 + x2 * (1.0f / 120 + x2 * (-1.0f / 5040 + x2 * (1.0f / 362880)))));\n"
    "  float c = 1.0f + x2 * (-0.5f + x2 * (1.0f / 24 + x2 * (-1.0f / 720 + x2 * (1.0f / 40320))));\n"
    "  float swap = (float)(quarter & 1), keep = 1.0f - swap;\n"
    "  float sin_sign = 1.0f - (float)(quarter & 2), cos_sign = 1.0f - (float)((quarter + 1) & 2);\n"
    "  return (float2)(sin_sign * (s * keep + c * swap), cos_sign * (c * keep + s * swap)); }\n";

static kiln_status kernel_rand(const kiln__op *op) {
    const kiln__view *out = &op->out[0];
    kiln__opencl_device *d = kiln__opencl_device_of(out->storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = out->dtype;
    if (!kiln__dtype_is_float(dt)) {
        kiln__kernel_error("random numbers need a float output, got %s", kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    if (!d->fp64) {
        kiln__kernel_error("no OpenCL kernel for %s without double precision yet", kiln__opcode_name(op->code));
        return KILN_ERR_UNSUPPORTED;
    }
    bool f64 = dt == KILN_F64 && op->code != KILN__OP_RAND_BERNOULLI;
    double a = op->p.f[0], b = op->p.f[1];
    double below_hi = f64 ? nextafter(b, a) : (double)nextafterf((float)b, (float)a);
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, true);
    kiln__text_printf(&s, "%s%s", kiln__opencl_layout_helpers, PHILOX);
    kiln__text_printf(&s,
                      "__kernel void k(long n, long8 shape8, long8 st8, long oo, ulong seed, ulong offset, double a, double b,\n"
                      "  double below_hi, __global %s *y) {\n"
                      "  long e = get_global_id(0); if (e >= n) return;\n"
                      "  long shape[8], st[8], c[8]; unpack(shape8, shape); unpack(st8, st); coords(e, shape, c);\n"
                      "  long at = oo + dot(c, st); ulong i = offset + (ulong)e;\n",
                      kiln__opencl_storetype(dt));
    if (f64) {
        kiln__text_printf(&s, "  uint4 w = philox(i / 2, seed); int half_ = (int)(i %% 2);\n");
        if (op->code == KILN__OP_RAND_UNIFORM)
            kiln__text_printf(&s, "  uint hi = half_ ? w.z : w.x, lo = half_ ? w.w : w.y;\n"
                                    "  double u = (double)((((ulong)hi << 32) | lo) >> 11) * 0x1.0p-53;\n"
                                    "  double width = b - a; double r = isfinite(width) ? a + width * u : a * (1.0 - u) + b * u;\n"
                                    "  double v = r >= b && a < b ? below_hi : r;\n");
        else
            kiln__text_printf(&s, "  double radius = sqrt(-2.0 * log((double)(((((ulong)w.x << 32) | w.y) >> 11) + 1) * 0x1.0p-53));\n"
                                    "  double angle = 6.28318530717958647692 * ((double)((((ulong)w.z << 32) | w.w) >> 11) * 0x1.0p-53);\n"
                                    "  double v = a + b * (radius * (half_ ? sin(angle) : cos(angle)));\n");
        kiln__text_printf(&s, "  y[at] = v;\n}\n");
    } else {
        kiln__text_printf(&s, "  uint4 w = philox(i / 4, seed); int q = (int)(i %% 4);\n");
        if (op->code == KILN__OP_RAND_UNIFORM)
            kiln__text_printf(&s, "  double width = b - a; float r = (float)(a + width * (double)unit_f32(word(w, q)));\n"
                                    "  if (!isfinite(width)) { double u = unit_f32(word(w, q)), rr = a * (1.0 - u) + b * u;\n"
                                    "    r = (float)(rr >= b && a < b ? below_hi : rr); }\n"
                                    "  float v = r >= (float)b && a < b ? (float)below_hi : r;\n");
        else if (op->code == KILN__OP_RAND_NORMAL)
            kiln__text_printf(&s, "  int p = q / 2; float radius = sqrt(neg2log(unit_open_f32(word(w, 2 * p))));\n"
                                    "  float2 sc = sincos_turn(unit_f32(word(w, 2 * p + 1)));\n"
                                    "  float v = (float)a + (float)b * (radius * ((q & 1) ? sc.x : sc.y));\n");
        else
            kiln__text_printf(&s, "  float v = (double)word(w, q) * 0x1.0p-32 < a ? 1.0f : 0.0f;\n");
        if (dt == KILN_F16) kiln__text_printf(&s, "  vstore_half_rte(v, at, y);\n}\n");
        else if (dt == KILN_BF16) kiln__text_printf(&s, "  y[at] = f2bf(v);\n}\n");
        else kiln__text_printf(&s, "  y[at] = v;\n}\n");
    }
    cl_long8 shape8, st8;
    kiln__opencl_pack8(&shape8, out->shape, out->ndim, 1);
    kiln__opencl_pack8(&st8, out->strides, out->ndim, 0);
    cl_long n = kiln__view_numel(out), oo = out->offset;
    cl_ulong seed = (cl_ulong)op->pi[0], offset = (cl_ulong)op->pi[1];
    cl_mem y = kiln__opencl_mem(out->storage);
    kiln__opencl_arg args[] = {{8, &n}, {64, &shape8}, {64, &st8}, {8, &oo}, {8, &seed}, {8, &offset},
                           {8, &a}, {8, &b},       {8, &below_hi}, {sizeof y, &y}};
    return kiln__opencl_run(d, op, &s, (size_t)n, args, 10);
}

void kiln__opencl_register_random(kiln__kernel_fn *table) {
    table[KILN__OP_RAND_UNIFORM] = kernel_rand;
    table[KILN__OP_RAND_NORMAL] = kernel_rand;
    table[KILN__OP_RAND_BERNOULLI] = kernel_rand;
}

#endif
