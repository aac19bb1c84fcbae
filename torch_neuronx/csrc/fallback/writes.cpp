// fallback/writes.cpp - the writes that aten schemas do not declare, for
// ops answered by the CPU fallback (see the header).
#include "fallback/writes.h"

#include <array>
#include <string_view>

namespace neuron {
namespace {

struct UndeclaredWriteOp {
    std::string_view name;                 // "aten::..." without overload
    std::string_view overload;             // "" for the default overload
    std::array<std::string_view, 2> args;  // argument names written; "" = unused slot
};

// Every overload that runs a CPU kernel writing the named arguments in place.
// CUDA-only relatives (cudnn_batch_norm, miopen_batch_norm,
// batch_norm_gather_stats_with_counts, _cudnn_rnn's dropout_state) have no
// CPU kernel and never reach this fallback with a result to lose.
constexpr std::array<UndeclaredWriteOp, 5> kUndeclaredWrites = {{
    // training=True updates the running statistics in place.
    {"aten::native_batch_norm", "", {"running_mean", "running_var"}},
    {"aten::native_batch_norm", "out", {"running_mean", "running_var"}},
    // SyncBatchNorm's CPU path / batch_norm_stats helpers: same update.
    {"aten::batch_norm_update_stats", "", {"running_mean", "running_var"}},
    {"aten::batch_norm_update_stats", "out", {"running_mean", "running_var"}},
    // The oneDNN LSTM backward reuses its workspace argument as scratch.
    // PyTorch selects it only for CPU tensors; listed so a direct call on
    // neuron tensors still sees the CPU semantics.
    {"aten::mkldnn_rnn_layer_backward", "", {"workspace", ""}},
}};

const UndeclaredWriteOp *find_undeclared_writes(const c10::OperatorName &name) {
    for (const UndeclaredWriteOp &op : kUndeclaredWrites)
        if (op.name == name.name && op.overload == name.overload_name) return &op;
    return nullptr;
}

}  // namespace

bool is_undeclared_write(const c10::OperatorName &op, std::string_view arg) {
    const UndeclaredWriteOp *entry = find_undeclared_writes(op);
    if (!entry) return false;
    for (std::string_view n : entry->args)
        if (!n.empty() && n == arg) return true;
    return false;
}

}  // namespace neuron
