// aten/eager_group.h - Adaptive Eager Execution: eager elementwise ops queued
// on a stream are recorded instead of launched, and run as one kernel that
// the graph compiler (trn/compiler.h) fused, with the same bits as the
// unfused ops (both sides compute through trn/scalar.h). Design and limits:
// docs/adaptive-eager.md.
//
// Owns: the per-process group being recorded (one stream at a time), the
// pattern cache (key -> compiled program), the background compile thread,
// the libtrn pending hook that flushes a group before anything else reaches
// its stream, and the _C._eager_fusion_* bindings. Adapters only call
// offer_ew() and name why a group ends (EndHint).
#pragma once

#include <ATen/TensorIterator.h>

#include "trn/trn.h"

namespace neuron::eager_group {

// Why a group ended (its metric EagerGroupEnd.<name>).
enum class End : int {
    HostRead,    // a device -> host copy: .item(), .cpu(), print
    Sync,        // a stream / device / event synchronize or query
    Op,          // an op the recorder does not take (matmul, reduce, ...)
    Fallback,    // an op rerun on the CPU
    Collective,  // a collective
    Alias,       // a write to a recorded buffer through another view
    Shape,       // an op over another iteration shape
    Stream,      // an op on another stream
    Cap,         // the group reached its size cap
    Off,         // fusion was switched off (deterministic algorithms, env, API)
    Count,
};
const char *end_name(End e);

// Records the elementwise launch `d` (built over `iter` for stream `s`) into
// the current group when fusion is on and the op qualifies. True: recorded,
// the caller must not launch it. False: the caller launches it as usual (an
// open group is flushed first, by the stream's pending hook).
bool offer_ew(trn_stream *s, const trn_ew_desc &d, const at::TensorIteratorBase &iter,
              const char *name);

// The same for a same-device copy dst <- src (broadcast to dst's shape) with
// a floating destination: a cast node in the group.
bool offer_copy(trn_stream *s, const at::Tensor &dst, const at::Tensor &src);

// Called by the device allocator before each allocation of nbytes: the open
// group lets go of the storages it created that nobody else holds any more,
// so their memory can serve this allocation, as it would have with fusion
// off; and it runs now if the inputs only it still holds would make this
// allocation raise the device's peak of memory in use.
void release_dead_storages(size_t nbytes);

// Names the reason for flushes triggered on this thread while it lives
// (nested hints keep the outermost).
class EndHint {
public:
    explicit EndHint(End e);
    ~EndHint();
    EndHint(const EndHint &) = delete;
    EndHint &operator=(const EndHint &) = delete;

private:
    int prev_;
};

}  // namespace neuron::eager_group
