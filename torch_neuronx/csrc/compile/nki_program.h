// compile/nki_program.h - the compiled NKI kernel object shared by the NKI
// bindings (nki.cpp: _NkiProgram) and the graph compiler's (compiler.cpp: an
// NKI call as an extern step of a compiled graph, which keeps it alive).
#pragma once

#include "trn/nki.h"

namespace neuron {

struct NkiProgram {
    trn_nki_program *p = nullptr;
    NkiProgram() = default;
    NkiProgram(const NkiProgram &) = delete;
    NkiProgram &operator=(const NkiProgram &) = delete;
    ~NkiProgram() { trn_nki_program_free(p); }
};

}  // namespace neuron
