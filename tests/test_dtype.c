/* dtype names, sizes, promotion and the f16/bf16 conversions (checked exhaustively). */
#include <kiln.h>

#include "core/core-impl.h"
#include "kiln_test.h"

KT_TEST(names_and_sizes) {
    KT_CHECK(strcmp(kiln_dtype_name(KILN_BF16), "bf16") == 0);
    KT_CHECK(kiln_dtype_size(KILN_F64) == 8 && kiln_dtype_size(KILN_BOOL) == 1 && kiln_dtype_size(KILN_F16) == 2);
    KT_CHECK(kiln_dtype_size((kiln_dtype)99) == 0);
    KT_CHECK(strcmp(kiln_dtype_name((kiln_dtype)-1), "invalid") == 0);
    KT_CHECK(strcmp(kiln_status_str(KILN_ERR_SHAPE), "shape mismatch") == 0);
    KT_CHECK(strcmp(kiln_status_str((kiln_status)-999), "unknown status") == 0);
    KT_CHECK(strcmp(kiln_device_name(KILN_CPU), "cpu") == 0 && strcmp(kiln_device_name(KILN_CUDA), "cuda") == 0);
    KT_CHECK(strcmp(kiln_device_name((kiln_device)9), "invalid") == 0);
}

KT_TEST(promotion) {
    KT_CHECK(kiln__dtype_promote(KILN_I32, KILN_F32) == KILN_F32);
    KT_CHECK(kiln__dtype_promote(KILN_I64, KILN_I32) == KILN_I64);
    KT_CHECK(kiln__dtype_promote(KILN_BOOL, KILN_I32) == KILN_I32);
    KT_CHECK(kiln__dtype_promote(KILN_F16, KILN_BF16) == KILN_F32);
    KT_CHECK(kiln__dtype_promote(KILN_F16, KILN_F64) == KILN_F64);
    KT_CHECK(kiln__dtype_promote(KILN_I64, KILN_F16) == KILN_F16);
}

/* Reference: exact value of an f16 bit pattern, computed in double. */
static double f16_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v;
    if (exp == 31) v = man ? NAN : INFINITY;
    else if (exp == 0) v = ldexp(man, -24);
    else v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

KT_TEST(f16_round_trips_every_pattern) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kiln__f16_to_f32((uint16_t)h);
        double ref = f16_value((uint16_t)h);
        if (isnan(ref)) {
            bad += !isnan(f);
            bad += !(kiln__f32_to_f16(f) & 0x7c00) || !(kiln__f32_to_f16(f) & 0x3ff);
            continue;
        }
        bad += (double)f != ref;
        bad += kiln__f32_to_f16(f) != h;
    }
    KT_CHECK_MSG(bad == 0, "%d mismatches", bad);
}

KT_TEST(f16_rounds_to_nearest_even) {
    /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0) */
    KT_CHECK(kiln__f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00);
    KT_CHECK(kiln__f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02);
    KT_CHECK(kiln__f32_to_f16(65504.0f) == 0x7bff);
    KT_CHECK(kiln__f32_to_f16(65520.0f) == 0x7c00); /* rounds to inf */
    KT_CHECK(kiln__f32_to_f16(-1e-8f) == 0x8000);
    KT_CHECK(kiln__f32_to_f16(ldexpf(1, -24)) == 0x0001);
    KT_CHECK(kiln__f32_to_f16(ldexpf(1, -25)) == 0x0000);     /* tie to even: 0 */
    KT_CHECK(kiln__f32_to_f16(ldexpf(3, -25)) == 0x0002);     /* tie to even: 2 */
}

KT_TEST(bf16_conversions) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kiln__bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        bad += kiln__f32_to_bf16(f) != h;
    }
    KT_CHECK(bad == 0);
    KT_CHECK(kiln__f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80); /* tie to even */
    KT_CHECK(kiln__f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82);
    KT_CHECK(isnan(kiln__bf16_to_f32(kiln__f32_to_bf16(NAN))));
}

KT_TEST(f16_tensors_through_host_data) {
    uint16_t in[3] = {kiln__f32_to_f16(1.5f), kiln__f32_to_f16(-2.0f), kiln__f32_to_f16(0.25f)};
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F16, KILN_SHAPE(3), in);
    float out[3];
    KT_CHECK(kiln_into_data(kiln_cast(t, KILN_F32), out, sizeof out) == KILN_OK);
    KT_NEAR(out[0], 1.5, 0);
    KT_NEAR(out[1], -2.0, 0);
    KT_NEAR(out[2], 0.25, 0);
}

int main(void) {
    KT_RUN(names_and_sizes);
    KT_RUN(promotion);
    KT_RUN(f16_round_trips_every_pattern);
    KT_RUN(f16_rounds_to_nearest_even);
    KT_RUN(bf16_conversions);
    KT_RUN(f16_tensors_through_host_data);
    return kt_finish();
}
