/* dtype names, sizes, promotion, and f16/bf16 conversions (device names: device.c). */
#include <math.h>
#include <string.h>

#include "core/core-impl.h"

static const char *const dtype_names[KILN_DTYPE_COUNT] = {"f32", "f64", "i32", "i64", "bool", "f16", "bf16"};

bool kiln__dtype_valid(kiln_dtype d) { return (unsigned)d < KILN_DTYPE_COUNT; }

const char *kiln_dtype_name(kiln_dtype d) { return kiln__dtype_valid(d) ? dtype_names[d] : "invalid"; }

size_t kiln_dtype_size(kiln_dtype d) { return kiln__dtype_valid(d) ? kiln__elsize(d) : 0; }

bool kiln__dtype_is_float(kiln_dtype d) {
    return d == KILN_F32 || d == KILN_F64 || d == KILN_F16 || d == KILN_BF16;
}
bool kiln__dtype_is_int(kiln_dtype d) { return d == KILN_I32 || d == KILN_I64; }

static int promotion_rank(kiln_dtype d) {
    switch (d) {
    case KILN_BOOL: return 0;
    case KILN_I32: return 1;
    case KILN_I64: return 2;
    case KILN_BF16: return 3;
    case KILN_F16: return 3;
    case KILN_F32: return 4;
    case KILN_F64: return 5;
    default: return -1;
    }
}

kiln_dtype kiln__dtype_promote(kiln_dtype a, kiln_dtype b) {
    if (a == b) return a;
    if ((a == KILN_F16 && b == KILN_BF16) || (a == KILN_BF16 && b == KILN_F16)) return KILN_F32;
    return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

/* 0 bool, 1 integer, 2 floating point: PyTorch's categories. */
static int category(kiln_dtype d) { return d == KILN_BOOL ? 0 : kiln__dtype_is_int(d) ? 1 : 2; }

kiln_dtype kiln__dtype_result(kiln_dtype a, bool a_dims, kiln_dtype b, bool b_dims) {
    if (a_dims == b_dims) return kiln__dtype_promote(a, b);
    kiln_dtype dim = a_dims ? a : b, zero = a_dims ? b : a;
    /* torch's combine_categories: a 0-d operand changes the dtype only from a lower category */
    if (category(zero) > category(dim) || dim == KILN_BOOL) return kiln__dtype_promote(dim, zero);
    return dim;
}

kiln_dtype kiln__dtype_compute(kiln_dtype d) { return (d == KILN_F16 || d == KILN_BF16) ? KILN_F32 : d; }

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kiln__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {                                                       /* zero / subnormal */
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t kiln__f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 | ((abs >> 13) & 0x3ff) : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds past 65504: inf */
    if (abs < 0x38800000u) {                                   /* below f16 normal range */
        /* scale into the subnormal grid (2^-24 units), rounding to nearest even */
        float a = bits_f32(abs);
        float scaled = a * 16777216.0f; /* 2^24 */
        uint32_t q = (uint32_t)nearbyintf(scaled);
        return (uint16_t)(sign | q);
    }
    uint32_t mant = abs & 0x7fffff, exp = (abs >> 23) - 112;
    uint32_t half = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

float kiln__bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kiln__f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    uint32_t rounding = 0x7fff + ((u >> 16) & 1);
    return (uint16_t)((u + rounding) >> 16);
}

double kiln__load_as_f64(const void *base, kiln_dtype d, int64_t i) {
    switch (d) {
    case KILN_F32: return ((const float *)base)[i];
    case KILN_F64: return ((const double *)base)[i];
    case KILN_I32: return ((const int32_t *)base)[i];
    case KILN_I64: return (double)((const int64_t *)base)[i];
    case KILN_BOOL: return ((const uint8_t *)base)[i] ? 1.0 : 0.0;
    case KILN_F16: return kiln__f16_to_f32(((const uint16_t *)base)[i]);
    case KILN_BF16: return kiln__bf16_to_f32(((const uint16_t *)base)[i]);
    default: return NAN;
    }
}

void kiln__store_from_f64(void *base, kiln_dtype d, int64_t i, double v) {
    switch (d) {
    case KILN_F32: ((float *)base)[i] = (float)v; break;
    case KILN_F64: ((double *)base)[i] = v; break;
    case KILN_I32: ((int32_t *)base)[i] = (int32_t)kiln__saturate_i64(v, INT32_MIN, INT32_MAX); break;
    case KILN_I64: ((int64_t *)base)[i] = kiln__saturate_i64(v, INT64_MIN, INT64_MAX); break;
    case KILN_BOOL: ((uint8_t *)base)[i] = v != 0.0; break;
    case KILN_F16: ((uint16_t *)base)[i] = kiln__f32_to_f16((float)v); break;
    case KILN_BF16: ((uint16_t *)base)[i] = kiln__f32_to_bf16((float)v); break;
    default: break;
    }
}
