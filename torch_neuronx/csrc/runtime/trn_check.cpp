// runtime/trn_check.cpp - the one place where a libtrn status becomes an exception.
#include "runtime/trn_check.h"

#include <string>

namespace neuron {

void throw_trn_error(trn_status status, const char *expr, const char *func, const char *file,
                     int line) {
    std::string msg = trn_last_error();
    if (msg.empty()) msg = trn_status_string(status);
    trn_clear_error();
    (void)expr;
    const c10::SourceLocation loc{func, file, static_cast<uint32_t>(line)};
    switch (status) {
    case TRN_ERROR_OUT_OF_MEMORY: throw c10::OutOfMemoryError(loc, msg);
    case TRN_ERROR_UNSUPPORTED: throw c10::NotImplementedError(loc, msg);
    case TRN_ERROR_INVALID_ARGUMENT: throw c10::ValueError(loc, msg);
    default: throw c10::Error(loc, msg);
    }
}

}  // namespace neuron
