// trn/convert.h - float16 and bfloat16 <-> float32 conversions.
//
// Pure, branch-light static inline helpers shared by libtrn's kernels and
// usable from C or C++ without PyTorch. Results match c10::Half and
// c10::BFloat16: float32 -> 16-bit rounds to nearest even, overflows to
// infinity, and keeps NaN a (quiet) NaN of the same sign; widening is exact.
// Values are passed as raw uint16_t bit patterns.
#ifndef TRN_CONVERT_H
#define TRN_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline uint32_t trn_fp32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float trn_fp32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// Exact. Subnormal halves are rebuilt with one float subtraction instead of a
// normalisation loop (the method of the FP16 library that c10 uses).
static inline float trn_half_to_float(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    // Rebias the exponent (15 -> 127) by scaling with 2^-112; infinities and
    // NaNs land on exponent 255 because the shifted exponent saturates.
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float normalized = trn_fp32_from_bits((two_w >> 4) + exp_offset) *
                             trn_fp32_from_bits(UINT32_C(0x07800000));  // 2^-112
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float denormalized =
        trn_fp32_from_bits((two_w >> 17) | magic_mask) - 0.5f;
    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    const uint32_t bits = sign | (two_w < denormalized_cutoff
                                      ? trn_fp32_to_bits(denormalized)
                                      : trn_fp32_to_bits(normalized));
    return trn_fp32_from_bits(bits);
}

// Round to nearest even by letting the FPU do it: scaling by 2^112 then
// 2^-110 performs the overflow-to-infinity and the rounding of subnormals,
// and adding a power of two aligned to the target precision rounds the
// mantissa. Relies on the default rounding mode (never -ffast-math).
static inline uint16_t trn_float_to_half(float f) {
    const float scale_to_inf = trn_fp32_from_bits(UINT32_C(0x77800000));  // 2^112
    const float scale_to_zero = trn_fp32_from_bits(UINT32_C(0x08800000)); // 2^-110
    const uint32_t w = trn_fp32_to_bits(f);
    const float abs_f = trn_fp32_from_bits(w & UINT32_C(0x7FFFFFFF));
    float base = (abs_f * scale_to_inf) * scale_to_zero;
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
    base = trn_fp32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = trn_fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) |
                      (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}

// Exact: bfloat16 is the top half of a float32.
static inline float trn_bf16_to_float(uint16_t b) {
    return trn_fp32_from_bits((uint32_t)b << 16);
}

// A select, not an early return, so that loops over it vectorize.
static inline uint16_t trn_float_to_bf16(float f) {
    const uint32_t u = trn_fp32_to_bits(f);
    const uint32_t rounding_bias = UINT32_C(0x7FFF) + ((u >> 16) & 1u);
    const uint32_t rounded = (u + rounding_bias) >> 16;
    // NaN: keep sign and top payload bits, force the quiet bit, so that the
    // rounding cannot turn it into an infinity.
    const uint32_t nan = (u >> 16) | UINT32_C(0x0040);
    return (uint16_t)((u & UINT32_C(0x7FFFFFFF)) > UINT32_C(0x7F800000) ? nan : rounded);
}

#endif
