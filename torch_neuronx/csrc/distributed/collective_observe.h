// distributed/collective_observe.h - what the profiler, the log and the metrics see of
// each collective of the neuron process group (distributed/process_group.cpp owns
// the collectives; this owns their observation).
//
// A collective is described on the calling thread (its CPU op's profiler
// correlation id, the caller's current stream, the message size) and
// finished on the thread that ran it: one TRN_ACTIVITY_COLLECTIVE record
// through trn_trace_record (Kineto shows it as a `collective_comm` event on
// the device's row, linked to the CPU op), TRN_COUNTER_COLLECTIVES and
// TRN_COUNTER_COLLECTIVE_BYTES, and a DEBUG line of the "collective" log.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace neuron {

struct CollectiveRecord {
    const char *name = "";  // "neuron:all_reduce"
    int device = -1;
    int64_t stream = 0;        // the caller's current stream
    uint64_t correlation = 0;  // the launching CPU op's (0: no profiler)
    uint64_t bytes = 0;        // message size: the larger of input / output
    std::string detail;        // "float32 [1024], rank 0 of 2, shm"
    uint64_t start_ns = 0;     // set when the collective starts running
};

// On the calling thread. `tensors` are every tensor the op reads or writes,
// `outputs` those it writes (they may be among `tensors`).
CollectiveRecord collective_describe(const char *name, int device, int rank, int size,
                                     const char *transport, const std::vector<at::Tensor> &tensors,
                                     const std::vector<at::Tensor> &outputs);
// On the thread that runs the collective, right before and after it.
void collective_started(CollectiveRecord &rec);
void collective_finished(const CollectiveRecord &rec, bool ok);

}  // namespace neuron
