// test_cpu_level.c - the choice of the kernels' CPU level (runtime/cpu_level.c).
// CTest runs this once with TORCH_NEURONX_CPU_CAPABILITY unset and once per
// value in libtrn/CMakeLists.txt (each built level, and names it refuses):
// the expectation follows from the variable, the levels built and the CPU.
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trn/cpu.h"

static bool is_built(const char *name) {
    for (int i = 0; i < trn_cpu_level_count(); i++)
        if (strcmp(trn_cpu_level_name(i), name) == 0) return true;
    return false;
}

int main(void) {
    int count = trn_cpu_level_count();
    CHECK(count >= 1);
    CHECK(trn_cpu_level_name(-1) == NULL);
    CHECK(trn_cpu_level_name(count) == NULL);
    for (int i = 0; i < count; i++) CHECK(trn_cpu_level_name(i) != NULL);

    __builtin_cpu_init();
    CHECK_INT(trn_cpu_level_supported("avx2"), __builtin_cpu_supports("x86-64-v3") != 0);
    CHECK_INT(trn_cpu_level_supported("avx512"), __builtin_cpu_supports("x86-64-v4") != 0);
    CHECK(trn_cpu_level_supported("native"));
    CHECK(!trn_cpu_level_supported("amx"));
    CHECK(!trn_cpu_level_supported(NULL));

    const char *want = getenv("TORCH_NEURONX_CPU_CAPABILITY");
    const char *chosen = trn_cpu_capability();
    CHECK(is_built(chosen));
    if (want == NULL || *want == '\0') {
        // The last (best) level built that this CPU runs.
        const char *best = NULL;
        for (int i = 0; i < count; i++)
            if (trn_cpu_level_supported(trn_cpu_level_name(i))) best = trn_cpu_level_name(i);
        CHECK(best != NULL);
        if (best) CHECK_STR(chosen, best);
        CHECK_OK(trn_cpu_level_status());
        CHECK_OK(trn_runtime_init());
    } else if (is_built(want) && trn_cpu_level_supported(want)) {
        CHECK_STR(chosen, want);
        CHECK_OK(trn_cpu_level_status());
        CHECK_OK(trn_runtime_init());
    } else {
        // Refused: the baseline stays loaded, and the first device use fails
        // with the reason.
        CHECK_STR(chosen, trn_cpu_level_name(0));
        CHECK_STATUS(trn_cpu_level_status(), TRN_ERROR_UNSUPPORTED);
        CHECK_CONTAINS(trn_last_error(), want);
        CHECK_CONTAINS(trn_last_error(), is_built(want) ? "this CPU lacks" : "built: ");
        CHECK_STATUS(trn_runtime_init(), TRN_ERROR_UNSUPPORTED);
        CHECK_CONTAINS(trn_last_error(), "TORCH_NEURONX_CPU_CAPABILITY");
        void *p = NULL;
        CHECK_STATUS(trn_mem_alloc(0, 64, NULL, &p), TRN_ERROR_UNSUPPORTED);
    }
    return TEST_REPORT();
}
