// cpu_level.c - chooses the CPU level libtrn's kernels run at, once, when
// libtrn loads (a constructor: before any thread or kernel of libtrn runs,
// so the dispatch table is written while nothing reads it). The best level
// built that this CPU runs, unless TORCH_NEURONX_CPU_CAPABILITY names one (as
// ATEN_CPU_CAPABILITY does for ATen); a level that is not built or that the
// CPU lacks is refused: the baseline stays and trn_runtime_init reports why,
// so the first device use raises that message.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "cpu_level.h"

static int g_chosen;  // index into trn__cpu_levels_built
static trn_status g_status = TRN_SUCCESS;
static char g_error[TRN__ERROR_MAX];

bool trn_cpu_level_supported(const char *level) {
    if (level == NULL) return false;
#if defined(__x86_64__)
    __builtin_cpu_init();  // may run before libgcc's own constructor
    if (strcmp(level, "avx2") == 0) return __builtin_cpu_supports("x86-64-v3");
    if (strcmp(level, "avx512") == 0) return __builtin_cpu_supports("x86-64-v4");
#endif
    // `native` is built by and for the machine that runs it (development builds).
    return strcmp(level, "native") == 0;
}

static int level_index(const char *name) {
    for (int i = 0; i < trn__cpu_level_built_count; i++)
        if (strcmp(trn__cpu_levels_built[i].name, name) == 0) return i;
    return -1;
}

static void built_list(char *out, size_t size) {
    out[0] = '\0';
    for (int i = 0; i < trn__cpu_level_built_count; i++) {
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s", i ? ", " : "", trn__cpu_levels_built[i].name);
    }
}

static void choose(void) {
    char built[128];
    built_list(built, sizeof built);
    const char *want = getenv("TORCH_NEURONX_CPU_CAPABILITY");
    int chosen = -1;
    if (want != NULL && *want != '\0') {
        chosen = level_index(want);
        if (chosen < 0) {
            g_status = TRN_ERROR_UNSUPPORTED;
            snprintf(g_error, sizeof g_error,
                     "TORCH_NEURONX_CPU_CAPABILITY='%s' is not a CPU level this libtrn was "
                     "built with (built: %s); unset it to let libtrn choose",
                     want, built);
            return;
        }
        if (!trn_cpu_level_supported(want)) {
            g_status = TRN_ERROR_UNSUPPORTED;
            snprintf(g_error, sizeof g_error,
                     "TORCH_NEURONX_CPU_CAPABILITY='%s': this CPU lacks the instructions that "
                     "level needs (%s); levels it runs are chosen automatically when the "
                     "variable is unset (built: %s)",
                     want,
                     strcmp(want, "avx512") == 0 ? "AVX-512 F/BW/CD/DQ/VL, x86-64-v4"
                                                 : "AVX2/FMA/BMI2, x86-64-v3",
                     built);
            return;
        }
    } else {
        for (int i = trn__cpu_level_built_count - 1; i >= 0 && chosen < 0; i--)
            if (trn_cpu_level_supported(trn__cpu_levels_built[i].name)) chosen = i;
        if (chosen < 0) {
            g_status = TRN_ERROR_UNSUPPORTED;
            snprintf(g_error, sizeof g_error,
                     "this CPU runs none of the levels OpenNeuron's kernels were built for "
                     "(built: %s; the baseline, avx2, needs an x86-64-v3 CPU: AVX2, FMA, BMI2)",
                     built);
            return;
        }
    }
    const void *const *table = trn__cpu_levels_built[chosen].table;
    for (int i = 0; i < trn__cpu_level_symbol_count; i++)
        trn__cpu_level_slots[i] = (void *)table[i];
    g_chosen = chosen;
}

__attribute__((constructor)) static void cpu_level_init(void) { choose(); }

const char *trn_cpu_capability(void) { return trn__cpu_levels_built[g_chosen].name; }

int trn_cpu_level_count(void) { return trn__cpu_level_built_count; }

const char *trn_cpu_level_name(int index) {
    if (index < 0 || index >= trn__cpu_level_built_count) return NULL;
    return trn__cpu_levels_built[index].name;
}

trn_status trn_cpu_level_status(void) {
    if (g_status == TRN_SUCCESS) return TRN_SUCCESS;
    return trn__set_error(g_status, "%s", g_error);
}
