// launch.c - running one generated kernel from its launch descriptor.
//
// Owns: trn__cc_kernel_launch. A generated shared object describes each
// kernel as data (trn/kernel_abi.h: a loop body shared by every kernel that
// computes the same thing, and the buffers this kernel binds to it), so gcc
// compiles one function per distinct loop and none per kernel; this is the
// code every kernel would otherwise have repeated.
#include <stdlib.h>

#include "../../internal.h"
#include "../compiler_impl.h"

// Kernels read a handful of buffers; more than this go through the heap.
#define LAUNCH_STACK_BUFS 32

trn_status trn__cc_kernel_launch(const trn_program *p, int kernel, void *const *bufs,
                                 const trn_kernel_abi *abi) {
    const trn_kernel_launch *l = &p->launches[kernel];
    void *stack[LAUNCH_STACK_BUFS];
    void **ptrs = stack;
    if (l->n_bufs > LAUNCH_STACK_BUFS) {
        ptrs = malloc((size_t)l->n_bufs * sizeof *ptrs);
        if (ptrs == NULL)
            return trn__set_error(TRN_ERROR_OUT_OF_MEMORY,
                                  "trn_run: out of memory binding kernel %d", kernel);
    }
    for (int i = 0; i < l->n_bufs; i++) ptrs[i] = bufs[l->bufs[i]];
    trn_kernel_ctx c = {ptrs, 0, 0, 0, 0, 0};
    abi->parallel_for(l->items, l->grain, l->body, &c);
    if (l->after != NULL) l->after(bufs, &c);
    if (ptrs != stack) free(ptrs);
    return c.failed ? (trn_status)abi->index_error(c.value, c.dim, c.size, c.style) : TRN_SUCCESS;
}
