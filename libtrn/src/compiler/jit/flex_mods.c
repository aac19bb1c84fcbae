// flex_mods.c - owns trn_flex_mods (trn/flex_attention.h): a FlexAttention
// score_mod / mask_mod rendered as C by the front end, compiled (or loaded
// from the disk cache) with the graph compiler's jit (trn__cc_build_shared:
// same key rule, cache and C compiler settings), and the two entry points
// the flex attention kernels call.
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "trn/flex_attention.h"

#include "../../internal.h"
#include "../compiler_impl.h"
#include "../../runtime/stream_drain.h"

struct trn_flex_mods {
    void *dl;
    trn_flex_score_fn score;
    trn_flex_grad_fn grad;
    char key[65];
    int from_cache;
    double seconds;
};

trn_status trn_flex_mods_compile(const char *source, const trn_compile_options *opts,
                                 trn_flex_mods **out) {
    if (source == NULL || opts == NULL || out == NULL)
        return trn__set_error(TRN_ERROR_INVALID_ARGUMENT, "trn_flex_mods_compile: NULL argument");
    *out = NULL;
    trn_flex_mods *m = calloc(1, sizeof *m);
    if (m == NULL)
        return trn__set_error(TRN_ERROR_OUT_OF_MEMORY, "trn_flex_mods_compile: out of memory");
    trn_status st = trn__cc_build_shared(source, opts, &m->dl, m->key, &m->from_cache, &m->seconds);
    if (st == TRN_SUCCESS) {
        const int *abi = dlsym(m->dl, "trn_flex_abi");
        void *score = dlsym(m->dl, "flex_score");
        void *grad = dlsym(m->dl, "flex_grad");
        // Object pointers to function pointers through memcpy (ISO C has no
        // cast between them).
        memcpy(&m->score, &score, sizeof score);
        memcpy(&m->grad, &grad, sizeof grad);
        if (abi == NULL || *abi != 1 || score == NULL)
            st = trn__set_error(TRN_ERROR_SYSTEM, "trn_flex_mods_compile: the shared object does "
                                                  "not define trn_flex_abi = 1 and flex_score");
    }
    if (st != TRN_SUCCESS) {
        trn_flex_mods_free(m);
        return st;
    }
    *out = m;
    return TRN_SUCCESS;
}

void trn_flex_mods_free(trn_flex_mods *m) {
    if (m == NULL) return;
    // Queued attention tasks may still call the modifiers.
    trn__streams_drain();
    if (m->dl) dlclose(m->dl);
    free(m);
}

trn_flex_score_fn trn_flex_mods_score(const trn_flex_mods *m) { return m ? m->score : NULL; }
trn_flex_grad_fn trn_flex_mods_grad(const trn_flex_mods *m) { return m ? m->grad : NULL; }
int trn_flex_mods_from_cache(const trn_flex_mods *m) { return m ? m->from_cache : 0; }
