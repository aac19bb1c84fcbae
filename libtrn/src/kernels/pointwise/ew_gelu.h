// ew_gelu.h - the erf GELU's float32 / float16 form over a block, its two
// branches evaluated apart (ew_gelu.c), for elementwise.c. Internal to libtrn.
#ifndef TRN_EW_GELU_H
#define TRN_EW_GELU_H

// o[i] = trn_sc_gelu_f32_form(a[i]) for i < n, the same bits; o may be a.
void trn__ew_gelu_f32_run(int n, float *o, const float *a);

#endif
