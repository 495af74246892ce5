/* Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * Element i of the stream for `seed` is a pure function of (seed, i): the generator has
 * no state, so a fill is split over threads freely and gives the same numbers for any
 * thread count, and a tensor can be filled piece by piece through `offset`.
 *
 *   float noise[1000];
 *   kiln__rand_normal_f32(42, 0, noise, 1000, 0.0f, 1.0f);
 *   // elements 500..999 again, identical to noise[500..999]:
 *   kiln__rand_normal_f32(42, 500, noise + 500, 500, 0.0f, 1.0f);
 *
 * Layout: the key is the seed (low word first); counter block b = (b_lo, b_hi, 0, 0)
 * yields four 32-bit words. Single-precision draws use one word per element (4 elements
 * per block), double-precision draws two words (2 per block). A normal pair comes from
 * one Box-Muller transform of two uniforms of the same block (u1 in (0, 1] from the first
 * word, so log(u1) is finite; angle 2 pi u2 from the second).
 *
 * The float transforms use kiln's own log and sine/cosine polynomials (within ~4e-7 of
 * libm in double), with no fused multiply-adds, so the values are also the same on any
 * x86-64 CPU, vector width and compiler (checked: AVX2 and SSE2 paths, gcc and clang). */
#ifndef KILN_BACKEND_CPU_PHILOX_H
#define KILN_BACKEND_CPU_PHILOX_H

#include <stdint.h>

/* One Philox4x32-10 block: out = bijection(counter) keyed by key. */
void kiln__philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* Uniform in [lo, hi): never exactly hi when lo < hi. */
void kiln__rand_uniform_f32(uint64_t seed, uint64_t offset, float *out, int64_t n, float lo, float hi);
void kiln__rand_uniform_f64(uint64_t seed, uint64_t offset, double *out, int64_t n, double lo,
                            double hi);

/* Normal(mean, std) by Box-Muller; finite for finite mean and std (no log(0)). */
void kiln__rand_normal_f32(uint64_t seed, uint64_t offset, float *out, int64_t n, float mean,
                           float std);
void kiln__rand_normal_f64(uint64_t seed, uint64_t offset, double *out, int64_t n, double mean,
                           double std);

/* 1 with probability p, else 0 (p <= 0: all 0, p >= 1: all 1). */
void kiln__rand_bernoulli_f32(uint64_t seed, uint64_t offset, float *out, int64_t n, double p);

#endif
