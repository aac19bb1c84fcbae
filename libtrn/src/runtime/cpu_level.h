// runtime/cpu_level.h - the kernels' per-level dispatch table, shared by the
// generated trampolines (build/.../cpu_levels/dispatch.c, made by
// libtrn/cmake/trn_cpu_levels.cmake) and the code that fills it
// (cpu_level.c).
#ifndef TRN_RUNTIME_CPU_LEVEL_H
#define TRN_RUNTIME_CPU_LEVEL_H

#include "trn/cpu.h"

typedef struct trn__cpu_level {
    const char *name;          // "avx2", "avx512", "native"
    const void *const *table;  // one address per kernel entry point
} trn__cpu_level;

// Generated: the levels built (baseline first) and the entry points' count.
extern const trn__cpu_level trn__cpu_levels_built[];
extern const int trn__cpu_level_built_count;
extern const int trn__cpu_level_symbol_count;
// The table the trampolines jump through (hidden: the trampolines address it
// %rip-relative). Holds the baseline level until cpu_level.c chooses.
extern void *trn__cpu_level_slots[] __attribute__((visibility("hidden")));

#endif  // TRN_RUNTIME_CPU_LEVEL_H
