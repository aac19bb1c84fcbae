// trn/convert.h - float16, bfloat16 and the 8-bit floats <-> float32.
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
    const float denormalized = trn_fp32_from_bits((two_w >> 17) | magic_mask) - 0.5f;
    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    const uint32_t bits = sign | (two_w < denormalized_cutoff ? trn_fp32_to_bits(denormalized)
                                                              : trn_fp32_to_bits(normalized));
    return trn_fp32_from_bits(bits);
}

// Round to nearest even by letting the FPU do it: scaling by 2^112 then
// 2^-110 performs the overflow-to-infinity and the rounding of subnormals,
// and adding a power of two aligned to the target precision rounds the
// mantissa. Relies on the default rounding mode (never -ffast-math).
static inline uint16_t trn_float_to_half(float f) {
    const float scale_to_inf = trn_fp32_from_bits(UINT32_C(0x77800000));   // 2^112
    const float scale_to_zero = trn_fp32_from_bits(UINT32_C(0x08800000));  // 2^-110
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
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}

// Exact: bfloat16 is the top half of a float32.
static inline float trn_bf16_to_float(uint16_t b) { return trn_fp32_from_bits((uint32_t)b << 16); }

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

// ---- 8-bit floats -----------------------------------------------------------
// float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz and
// float8_e8m0fnu as raw uint8_t codes. The one definition of these
// conversions: the copy kernel, the scaled matmuls and generated code all
// call these. Results are bit-identical to PyTorch CPU's conversions
// (tests/test_fp8_convert.py checks all 256 codes and a dense float32
// sweep), which are not uniform across the formats:
//   float32 -> 8 bits rounds to nearest even. On overflow e4m3fn saturates
//   to +-448 (infinities too), e5m2 goes to +-inf, the fnuz formats go to
//   their single NaN 0x80 (which also takes -0's place: -0 -> 0). NaN keeps
//   its sign where the format has one. e8m0fnu keeps only the exponent,
//   rounds the mantissa to nearest even on the exponent's lowest bit, and
//   ignores the sign; inf and NaN give its NaN 0xFF.
//   8 bits -> float32 is exact; the NaN bit patterns are PyTorch's (e4m3fn
//   0x7FF00000, e5m2 as the float16 it is the top byte of, fnuz/e8m0
//   0x7F800001), so widening the float32 to float64 matches as well.
// Other sources convert through float32 (a float64 is rounded to float32
// first, as c10 does), and 8-bit values reach float16/bfloat16 through
// trn_fp8_nan_to_half/bf16 below for PyTorch's NaN patterns.

// |f| (bits, sign cleared) rounded to nearest even on a grid of `mb`
// mantissa bits with exponent bias `bias`: the magnitude code, unclamped
// (values past the largest finite give codes past it).
static inline uint32_t trn__f8_round_mag(uint32_t abs_bits, int mb, int bias) {
    // Below the smallest normal 2^(1-bias): add 2^(24-bias-mb), whose ulp is
    // the 8-bit subnormal step, and let the FPU round; the code is what the
    // addition left in the low bits.
    const uint32_t magic_bits = (uint32_t)(127 + 24 - bias - mb) << 23;
    const float sum = trn_fp32_from_bits(abs_bits) + trn_fp32_from_bits(magic_bits);
    const uint32_t sub = trn_fp32_to_bits(sum) - magic_bits;
    // Normal: round the float32 mantissa to mb bits (ties to even) and rebias.
    const int shift = 23 - mb;
    const uint32_t odd = (abs_bits >> shift) & 1u;
    const uint32_t rounded = (abs_bits + ((UINT32_C(1) << (shift - 1)) - 1u) + odd) >> shift;
    const uint32_t norm = rounded - ((uint32_t)(127 - bias) << mb);
    return abs_bits < ((uint32_t)(127 + 1 - bias) << 23) ? sub : norm;
}

// Magnitude code -> float32 bits for a finite 8-bit value.
static inline uint32_t trn__f8_decode_mag(uint32_t mag, int mb, int bias) {
    const uint32_t e = mag >> mb, m = mag & ((UINT32_C(1) << mb) - 1u);
    const uint32_t norm = ((e + 127u - (uint32_t)bias) << 23) | (m << (23 - mb));
    // Subnormal: m steps of 2^(1-bias-mb), exact in float32.
    const float sub = (float)m * trn_fp32_from_bits((uint32_t)(127 + 1 - bias - mb) << 23);
    return e == 0 ? trn_fp32_to_bits(sub) : norm;
}

static inline uint8_t trn_float_to_fp8_e4m3fn(float f) {
    const uint32_t u = trn_fp32_to_bits(f), a = u & UINT32_C(0x7FFFFFFF);
    const uint32_t sign = (u >> 24) & 0x80u;
    uint32_t code = trn__f8_round_mag(a, 3, 7);
    code = code > 0x7Eu ? 0x7Eu : code;  // saturate (infinities too)
    code = a > UINT32_C(0x7F800000) ? 0x7Fu : code;
    return (uint8_t)(sign | code);
}

static inline float trn_fp8_e4m3fn_to_float(uint8_t c) {
    const uint32_t mag = c & 0x7Fu, sign = (uint32_t)(c & 0x80u) << 24;
    const uint32_t bits = mag == 0x7Fu ? UINT32_C(0x7FF00000) : trn__f8_decode_mag(mag, 3, 7);
    return trn_fp32_from_bits(sign | bits);
}

static inline uint8_t trn_float_to_fp8_e5m2(float f) {
    const uint32_t u = trn_fp32_to_bits(f), a = u & UINT32_C(0x7FFFFFFF);
    const uint32_t sign = (u >> 24) & 0x80u;
    uint32_t code = trn__f8_round_mag(a, 2, 15);
    code = code > 0x7Cu ? 0x7Cu : code;  // overflow -> infinity
    code = a > UINT32_C(0x7F800000) ? 0x7Fu : code;
    return (uint8_t)(sign | code);
}

// e5m2 is the top byte of a float16.
static inline float trn_fp8_e5m2_to_float(uint8_t c) {
    return trn_half_to_float((uint16_t)((uint16_t)c << 8));
}

// The fnuz formats: no infinities, no -0, one NaN (0x80).
static inline uint8_t trn__float_to_fnuz(float f, int mb, int bias) {
    const uint32_t u = trn_fp32_to_bits(f), a = u & UINT32_C(0x7FFFFFFF);
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t code = trn__f8_round_mag(a, mb, bias);
    uint32_t r = code == 0 ? 0u : (sign | code);
    r = (code > 0x7Fu || a > UINT32_C(0x7F800000)) ? 0x80u : r;
    return (uint8_t)r;
}

static inline float trn__fnuz_to_float(uint8_t c, int mb, int bias) {
    const uint32_t mag = c & 0x7Fu, sign = (uint32_t)(c & 0x80u) << 24;
    const uint32_t bits =
        c == 0x80u ? UINT32_C(0x7F800001) : (sign | trn__f8_decode_mag(mag, mb, bias));
    return trn_fp32_from_bits(bits);
}

static inline uint8_t trn_float_to_fp8_e4m3fnuz(float f) { return trn__float_to_fnuz(f, 3, 8); }
static inline float trn_fp8_e4m3fnuz_to_float(uint8_t c) { return trn__fnuz_to_float(c, 3, 8); }
static inline uint8_t trn_float_to_fp8_e5m2fnuz(float f) { return trn__float_to_fnuz(f, 2, 16); }
static inline float trn_fp8_e5m2fnuz_to_float(uint8_t c) { return trn__fnuz_to_float(c, 2, 16); }

// e8m0fnu: 2^(c-127); 0xFF is NaN. The float32 exponent goes up by one
// when the dropped mantissa is past one half; at exactly one half it goes up
// for normal inputs and stays for subnormal ones (PyTorch's tie rule).
static inline uint8_t trn_float_to_fp8_e8m0fnu(float f) {
    const uint32_t u = trn_fp32_to_bits(f);
    const uint32_t e = (u >> 23) & 0xFFu;
    const uint32_t half = (u >> 22) & 1u, rest = (u & UINT32_C(0x3FFFFF)) != 0;
    const uint32_t up = half & (rest | (e > 0));
    const uint32_t r = e == 0xFFu ? 0xFFu : e + up;
    return (uint8_t)r;
}

static inline float trn_fp8_e8m0fnu_to_float(uint8_t c) {
    uint32_t bits = (uint32_t)c << 23;
    bits = c == 0 ? UINT32_C(0x00400000) : bits;  // 2^-127, a float32 subnormal
    bits = c == 0xFFu ? UINT32_C(0x7F800001) : bits;
    return trn_fp32_from_bits(bits);
}

// An 8-bit value (already widened to float32) as float16 / bfloat16 with
// PyTorch CPU's NaN patterns: float16 keeps the sign and the top payload
// bits (what the vector conversion instruction does), bfloat16 gives the
// positive quiet NaN. Non-NaN values round as usual.
static inline uint16_t trn_fp8_value_to_half(float f) {
    const uint32_t u = trn_fp32_to_bits(f);
    const uint16_t nan = (uint16_t)(((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x3FFu));
    return (u & UINT32_C(0x7FFFFFFF)) > UINT32_C(0x7F800000) ? nan : trn_float_to_half(f);
}

static inline uint16_t trn_fp8_value_to_bf16(float f) {
    const uint32_t u = trn_fp32_to_bits(f);
    return (u & UINT32_C(0x7FFFFFFF)) > UINT32_C(0x7F800000) ? (uint16_t)0x7FC0u
                                                             : trn_float_to_bf16(f);
}

#endif
