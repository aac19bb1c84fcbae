// runtime/trn_check.h - turns libtrn status codes into PyTorch exceptions.
//
// Every libtrn call made from C++ goes through TRN_CHECK. The exception type
// follows the status (OOM -> torch.OutOfMemoryError, unsupported ->
// NotImplementedError, bad argument -> ValueError, others -> RuntimeError) and
// the message is libtrn's own, which already names the object involved.
#pragma once

#include <c10/util/Exception.h>

#include "trn/trn.h"

namespace neuron {

[[noreturn]] void throw_trn_error(trn_status status, const char *expr, const char *func,
                                  const char *file, int line);

}  // namespace neuron

#define TRN_CHECK(expr)                                                                            \
    do {                                                                                           \
        trn_status trn__st = (expr);                                                               \
        if (C10_UNLIKELY(trn__st != TRN_SUCCESS))                                                  \
            ::neuron::throw_trn_error(trn__st, #expr, __func__, __FILE__, __LINE__);               \
    } while (0)
