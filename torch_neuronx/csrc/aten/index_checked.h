// aten/index_checked.h - index tensors whose values a synchronized check
// already proved in range, so a later op reading the same values need not
// synchronize to check them again.
//
// An op that checks indices synchronizes after its launch so that a bad index
// raises at the call, as on CPU (aten/index.cpp, nll_loss in aten/train.cpp).
// Under asynchronous streams that wait also stops the host until every queued
// kernel has run, and the stream's worker then idles while Python goes on. A
// backward op reads the very index tensor its forward checked (embedding's
// indices in embedding_dense_backward, the target in nll_loss_backward): when
// nothing wrote it since, the forward's check already holds and the backward
// launches without waiting. Its kernel still checks every index and fails its
// task on a bad one, so a write that bypasses the version counter (`.data`)
// raises at the next synchronize instead of reading out of bounds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace neuron {

// What a check proved about every value v: 0 <= v < bound, or v == ignore
// for nll_loss targets (`ignore` is unused for plain indices).
struct IndexCheck {
    enum class Kind { Index, Target };
    Kind kind;
    int64_t bound;
    int64_t ignore = 0;
};

// Notes that `idx`'s values passed `check` (call after the synchronize that
// reported no error). Tensors without a version counter are not noted.
void index_checked_note(const at::Tensor &idx, const IndexCheck &check);

// True if the values `idx` reads now are ones a noted check proved within
// `need`: the same storage (still alive), elements and dtype, not written
// since (the version counter unchanged), checked against a range inside
// `need`'s.
bool index_checked_covers(const at::Tensor &idx, const IndexCheck &need);

}  // namespace neuron
