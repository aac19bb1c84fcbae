// ew_gelu.h - the erf GELU's float32 / float16 and bfloat16 forms over a
// block, each form's two branches evaluated apart (ew_gelu.c), for
// elementwise.c and ew_bf16.c. Internal to libtrn.
#ifndef TRN_EW_GELU_H
#define TRN_EW_GELU_H

// o[i] = trn_sc_gelu_f32_form(a[i]) for i < n, the same bits; o may be a.
void trn__ew_gelu_f32_run(int n, float *o, const float *a);
// o[i] = trn_sc_gelu_bf16_form(a[i]) (results to be stored in bfloat16).
void trn__ew_gelu_bf16_run(int n, float *o, const float *a);

#endif
