// trn/cpu.h - which CPU level libtrn's kernels run at. libtrn holds its
// kernels (src/kernels/) compiled once per level (AVX2 = x86-64-v3, AVX-512 =
// x86-64-v4, or `native` for a build made for its own machine) and picks one
// when it loads: the best the CPU runs, or TORCH_NEURONX_CPU_CAPABILITY.
// Kept out of trn.h on purpose (see docs/compile.md "Per-ISA kernels").
#ifndef TRN_CPU_H
#define TRN_CPU_H

#include <stdbool.h>

#include "trn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

// The level the kernels run at ("avx2", "avx512" or "native"); a static string.
const char *trn_cpu_capability(void);

// How many levels this libtrn was built with, and each one's name (baseline
// first; NULL when index is out of range).
int trn_cpu_level_count(void);
const char *trn_cpu_level_name(int index);

// Whether this CPU runs `level` (a name as above; false for unknown names).
bool trn_cpu_level_supported(const char *level);

// TRN_SUCCESS, or the error that choosing the level gave (an invalid or
// unsupported TORCH_NEURONX_CPU_CAPABILITY, a CPU below the baseline), with
// its message set; trn_runtime_init returns it too.
trn_status trn_cpu_level_status(void);

#ifdef __cplusplus
}
#endif

#endif  // TRN_CPU_H
