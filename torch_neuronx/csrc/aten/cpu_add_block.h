// aten/cpu_add_block.h - what libtrn needs to round 16-bit add / sub exactly as
// ATen's CPU kernel (trn_ew_desc / trn_foreach_desc .cpu_block).
#pragma once

#include <cstdint>

namespace neuron {

// Elements per vector step of ATen's CPU add for 16-bit floats: two
// Vectorized<Half/BFloat16> of 16 lanes. Also on AVX-512 machines: the add
// kernel is registered with REGISTER_DISPATCH, which leaves the AVX-512 slot
// empty, so the AVX2 build runs (measured: the scalar tail is len % 32).
inline int64_t cpu_add_block() { return 32; }

}  // namespace neuron
