// alloc_fault.h - the tests' handle on allocation-failure injection
// (alloc_fault.c). Defined only in builds with TRN_ALLOC_FAULTS (Debug); a
// test declares them weak and skips when they are absent.
#ifndef TRN_RUNTIME_ALLOC_FAULT_H
#define TRN_RUNTIME_ALLOC_FAULT_H

#include <stdbool.h>
#include <stdint.h>

// The nth allocation libtrn makes from now on (n >= 1, counted over all
// threads) returns NULL; the others succeed.
void trn__alloc_fault_arm(int64_t nth);
// Stops the countdown; true if the armed allocation was reached (and failed).
bool trn__alloc_fault_disarm(void);

#endif
