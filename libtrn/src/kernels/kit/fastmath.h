// fastmath.h - inline, branch-free float32 math for kernel hot loops (owned
// by the reduction family; to be merged into trn/scalar.h). A libm call per
// element keeps a loop scalar; these vectorize.
#ifndef TRN_KERNELS_FASTMATH_H
#define TRN_KERNELS_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline float trn__f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t trn__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// exp(x) for float32, < 2 ulp on the normal range (Cody-Waite range
// reduction x = n ln2 + r, |r| <= ln2/2, then the Cephes degree-6
// polynomial). x > 88.72 -> +inf; x < -87.33 -> 0 (results that would be
// subnormal flush to zero); NaN -> NaN. No conversions of NaN to integers:
// n is extracted with the 1.5 * 2^23 rounding trick.
static inline float trn_fast_expf(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float magic = 12582912.0f;  // 1.5 * 2^23
    float xc = x > 88.72283f ? 88.72283f : x;
    xc = xc < -87.33654f ? -87.33654f : xc;
    const float t = xc * log2e + magic;
    const float n = t - magic;  // round(xc / ln2), in [-126, 128]
    const int32_t ni = (int32_t)(trn__f32_bits(t) - trn__f32_bits(magic));
    float r = xc - n * ln2_hi;
    r = r - n * ln2_lo;
    const float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    // 2^n as 2^(n-1) * 2 for positive n, so that n = 128 does not overflow
    // the exponent field before the multiplication.
    const int32_t e = ni > 0 ? ni - 1 : ni;
    const float scale = trn__f32_from_bits(((uint32_t)(e + 127) & 0xFFu) << 23);
    float y = p * scale * (ni > 0 ? 2.0f : 1.0f);
    y = x > 88.72283f ? __builtin_inff() : y;
    y = x < -87.33654f ? 0.0f : y;
    return y;
}

#endif
