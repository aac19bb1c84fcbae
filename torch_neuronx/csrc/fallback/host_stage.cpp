// fallback/host_stage.cpp - the CPU fallback's run of one boxed call with its
// neuron operands staged on the host, aliasing preserved (see the header).
#include "fallback/host_stage.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "fallback/writes.h"
#include "runtime/device.h"

namespace neuron {
namespace {

// Host staging alignment: a multiple of every element size, so each
// operand's offset into its range's host copy is a whole number of elements.
constexpr int64_t kRangeAlign = 16;
// A lone operand whose bytes are this much sparser than its elements (a
// column of a large matrix) is copied compactly instead: nothing else can
// alias it, and copying the whole range it spans would cost far more.
constexpr int64_t kSparseSlack = 64 * 1024;

bool on_neuron(const at::Tensor &t) { return t.defined() && t.device().type() == kNeuron; }

// [begin, end) bytes of t's elements within its storage; numel > 0.
std::pair<int64_t, int64_t> byte_span(const at::Tensor &t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const int64_t item = static_cast<int64_t>(t.element_size());
    const int64_t begin = t.storage_offset() * item;
    return {begin, begin + (last + 1) * item};
}

// A tensor of `dtype` over `storage` with t's geometry at `offset` elements,
// with the keys of `key`'s backend and t's conjugate/negative bits.
at::Tensor view_of(const c10::Storage &storage, c10::DispatchKey key, caffe2::TypeMeta dtype,
                   at::IntArrayRef sizes, at::IntArrayRef strides, int64_t offset) {
    at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage),
                                                            c10::DispatchKeySet(key), dtype);
    v.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
    return v;
}

// One device operand: where it sits in the arguments and its host stand-in.
struct Operand {
    size_t arg;                 // index among the schema's arguments
    std::optional<size_t> pos;  // position within a list argument
    at::Tensor device;
    at::Tensor host;
    bool written = false;
    int range = -1;  // index into ranges; -1: staged alone
};

// A byte range of one device storage and its host copy, shared by every
// operand whose bytes intersect it.
struct Range {
    c10::Storage storage;
    int64_t begin = 0, end = 0;
    int64_t host_end = 0;  // end of the host copy; beyond `end` when a written
                           // operand's numel elements overrun its storage
    std::vector<size_t> members;
    at::Tensor host_bytes;
    bool written = false;
};

class HostStage {
public:
    HostStage(const c10::OperatorHandle &op, torch::jit::Stack &stack)
        : op_(op), stack_(stack), args_(op.schema().arguments()),
          begin_(stack.size() - args_.size()) {}

    void stage() {
        collect();
        group();
        for (Range &r : ranges_) copy_in(r);
        for (Operand &o : operands_)
            if (o.range < 0) copy_in_alone(o);
        rewrite_stack();
    }

    void commit() {
        for (Range &r : ranges_)
            if (r.written) copy_out(r);
        for (const Operand &o : operands_)
            if (o.range < 0 && o.written) at::_copy_from_and_resize(o.host, o.device);
    }

    // Returns: mutable aliases become the caller's device arguments, the rest
    // move to the call's device.
    void place_returns() {
        const auto &rets = op_.schema().returns();
        const size_t rbegin = stack_.size() - rets.size();
        for (size_t i = 0; i < rets.size(); ++i) {
            c10::IValue &v = stack_[rbegin + i];
            const c10::AliasInfo *alias = rets[i].alias_info();
            if (alias && alias->isWrite()) {
                v = aliased_argument(*alias, rets[i]);
                continue;
            }
            if (!target_) continue;
            if (v.isTensor() && v.toTensor().defined()) {
                v = v.toTensor().to(*target_);
            } else if (v.isTensorList()) {
                std::vector<at::Tensor> moved;
                for (const at::Tensor &t : v.toTensorList().vec())
                    moved.push_back(t.defined() ? t.to(*target_) : t);
                v = c10::List<at::Tensor>(moved);
            }
        }
    }

private:
    void add(size_t arg, std::optional<size_t> pos, const at::Tensor &t) {
        if (!on_neuron(t)) return;
        if (!target_) target_ = t.device();
        const c10::AliasInfo *alias = args_[arg].alias_info();
        Operand o{arg, pos, t, {}, false, -1};
        o.written = (alias && alias->isWrite()) ||
                    is_undeclared_write(op_.schema().operator_name(), args_[arg].name());
        operands_.push_back(std::move(o));
    }

    void collect() {
        for (size_t i = 0; i < args_.size(); ++i) {
            const c10::IValue &v = stack_[begin_ + i];
            original_.push_back(v);
            if (v.isTensor()) {
                add(i, std::nullopt, v.toTensor());
            } else if (v.isTensorList()) {
                const auto list = v.toTensorList();
                for (size_t k = 0; k < list.size(); ++k) add(i, k, list.get(k));
            } else if (v.isOptionalTensorList()) {
                const auto list = v.toOptionalTensorList();
                for (size_t k = 0; k < list.size(); ++k) {
                    const std::optional<at::Tensor> t = list.get(k);
                    if (t) add(i, k, *t);
                }
            } else if (v.isDevice()) {
                device_arg_ = v.toDevice();
            }
        }
        if (device_arg_) target_ = device_arg_;
        refuse_foreign_writes();
        // A call with no neuron operand (a factory op given device=neuron):
        // keep the device arguments' choice, as the generic fallback did.
    }

    // A written argument on another device than the call's: TensorIterator
    // refuses it on every backend (the CPU kernel would see only CPU tensors
    // here and write the caller's CPU tensor directly).
    void refuse_foreign_writes() const {
        if (!target_ || target_->type() != kNeuron) return;
        for (size_t i = 0; i < args_.size(); ++i) {
            const c10::AliasInfo *alias = args_[i].alias_info();
            if (!alias || !alias->isWrite()) continue;
            std::vector<at::Tensor> ts;
            const c10::IValue &v = original_[i];
            if (v.isTensor())
                ts.push_back(v.toTensor());
            else if (v.isTensorList())
                ts = v.toTensorList().vec();
            for (const at::Tensor &t : ts)
                TORCH_CHECK(!t.defined() || t.device().type() == kNeuron,
                            "Expected all tensors to be on the same device, but found at least "
                            "two devices, ",
                            *target_, " and ", t.device(), "! (argument '", args_[i].name(),
                            "' of ", op_.schema().operator_name(), ")");
        }
    }

    // Operands of one storage whose byte spans intersect share one range.
    void group() {
        std::map<const c10::StorageImpl *, std::vector<size_t>> by_storage;
        for (size_t i = 0; i < operands_.size(); ++i) {
            const at::Tensor &t = operands_[i].device;
            if (t.numel() == 0 || !t.has_storage() || t.layout() != c10::kStrided ||
                t.is_quantized())
                continue;
            by_storage[t.storage().unsafeGetStorageImpl()].push_back(i);
        }
        for (auto &[impl, members] : by_storage) {
            std::sort(members.begin(), members.end(), [&](size_t a, size_t b) {
                return byte_span(operands_[a].device).first < byte_span(operands_[b].device).first;
            });
            std::vector<Range> found;
            for (size_t i : members) {
                auto [b, e] = byte_span(operands_[i].device);
                int64_t host_end = e;
                const at::Tensor &t = operands_[i].device;
                if (operands_[i].written) {
                    // Some CPU out= kernels ignore out's strides and write
                    // numel elements from its first one (an expanded out):
                    // the host copy holds them wherever the device storage
                    // does, so they land in the storage as on CPU.
                    const int64_t dense = b + t.numel() * static_cast<int64_t>(t.element_size());
                    e = std::max(e, std::min(dense, static_cast<int64_t>(t.storage().nbytes())));
                    host_end = std::max(host_end, dense);
                }
                // Aligned before merging, so that ranges stay disjoint.
                b -= b % kRangeAlign;
                if (found.empty() || b >= found.back().end) {
                    Range r;
                    r.storage = operands_[i].device.storage();
                    r.begin = b;
                    r.end = e;
                    found.push_back(std::move(r));
                }
                Range &r = found.back();
                r.end = std::max(r.end, e);
                r.host_end = std::max({r.host_end, r.end, host_end});
                r.members.push_back(i);
            }
            for (Range &r : found) {
                if (r.members.size() == 1) {
                    const at::Tensor &t = operands_[r.members[0]].device;
                    const int64_t dense = t.numel() * static_cast<int64_t>(t.element_size());
                    if (r.end - r.begin > 2 * dense + kSparseSlack)
                        continue;  // staged alone, compactly
                }
                TORCH_CHECK(r.end <= static_cast<int64_t>(r.storage.nbytes()),
                            "a neuron tensor's elements lie outside its storage");
                const int index = static_cast<int>(ranges_.size());
                for (size_t i : r.members) {
                    operands_[i].range = index;
                    r.written |= operands_[i].written;
                }
                ranges_.push_back(std::move(r));
            }
        }
    }

    at::Tensor device_bytes(const Range &r) const {
        return view_of(r.storage, c10::DispatchKey::PrivateUse1, caffe2::TypeMeta::Make<uint8_t>(),
                       {r.end - r.begin}, {1}, r.begin);
    }

    void copy_in(Range &r) {
        r.host_bytes = at::empty({r.host_end - r.begin}, at::TensorOptions().dtype(at::kByte));
        r.host_bytes.narrow(0, 0, r.end - r.begin).copy_(device_bytes(r));
        if (r.host_end > r.end)  // slack past the device storage: defined, never copied back
            r.host_bytes.narrow(0, r.end - r.begin, r.host_end - r.end).zero_();
        for (size_t i : r.members) {
            Operand &o = operands_[i];
            const at::Tensor &t = o.device;
            const int64_t item = static_cast<int64_t>(t.element_size());
            o.host = view_of(r.host_bytes.storage(), c10::DispatchKey::CPU, t.dtype(), t.sizes(),
                             t.strides(), (t.storage_offset() * item - r.begin) / item);
            o.host._set_conj(t.is_conj());
            o.host._set_neg(t.is_neg());
            if (t.unsafeGetTensorImpl()->is_wrapped_number())
                o.host.unsafeGetTensorImpl()->set_wrapped_number(true);
        }
    }

    void copy_in_alone(Operand &o) {
        if (o.device.numel() == 0 && o.device.layout() == c10::kStrided && !o.device.is_quantized())
            o.host = at::empty_strided(o.device.sizes(), o.device.strides(),
                                       o.device.options().device(c10::kCPU));
        else
            o.host = o.device.to(c10::Device(c10::kCPU), /*non_blocking=*/false, /*copy=*/true);
    }

    void rewrite_stack() {
        for (size_t i = 0; i < args_.size(); ++i) {
            c10::IValue &v = stack_[begin_ + i];
            if (v.isDevice()) v = c10::Device(c10::kCPU);
        }
        // Lists are the caller's: each is copied once, then edited.
        std::vector<bool> copied(args_.size(), false);
        for (const Operand &o : operands_) {
            c10::IValue &v = stack_[begin_ + o.arg];
            if (!o.pos) {
                v = o.host;
            } else if (v.isTensorList()) {
                auto list = copied[o.arg] ? v.toTensorList() : v.toTensorList().copy();
                list.set(*o.pos, o.host);
                v = std::move(list);
            } else {
                auto list =
                    copied[o.arg] ? v.toOptionalTensorList() : v.toOptionalTensorList().copy();
                list.set(*o.pos, std::optional<at::Tensor>(o.host));
                v = std::move(list);
            }
            copied[o.arg] = true;
        }
    }

    // The CPU kernel left the range's host copy as the device bytes should
    // be; unless it resized a written operand (out= of another shape), in
    // which case each written operand is copied (and resized) on its own.
    void copy_out(Range &r) {
        bool same = r.host_bytes.storage().nbytes() == static_cast<size_t>(r.host_end - r.begin);
        for (size_t i : r.members) {
            const Operand &o = operands_[i];
            if (!o.written) continue;
            const int64_t item = static_cast<int64_t>(o.device.element_size());
            same = same && o.host.has_storage() &&
                   o.host.storage().unsafeGetStorageImpl() ==
                       r.host_bytes.storage().unsafeGetStorageImpl() &&
                   o.host.sizes() == o.device.sizes() && o.host.strides() == o.device.strides() &&
                   o.host.storage_offset() == (o.device.storage_offset() * item - r.begin) / item;
        }
        if (same) {
            at::Tensor dst = device_bytes(r);
            dst.copy_(r.host_bytes.narrow(0, 0, r.end - r.begin));
            return;
        }
        for (size_t i : r.members)
            if (operands_[i].written)
                at::_copy_from_and_resize(operands_[i].host, operands_[i].device);
    }

    c10::IValue aliased_argument(const c10::AliasInfo &alias, const c10::Argument &ret) const {
        for (size_t i = 0; i < args_.size(); ++i) {
            const c10::AliasInfo *a = args_[i].alias_info();
            if (a && *a == alias) return original_[i];
        }
        TORCH_CHECK(false, "The operator ", op_.schema().operator_name(),
                    " appears to have invalid alias information: no argument matches the "
                    "mutable alias of its return ",
                    ret);
    }

    const c10::OperatorHandle &op_;
    torch::jit::Stack &stack_;
    const std::vector<c10::Argument> &args_;
    const size_t begin_;
    std::vector<c10::IValue> original_;
    std::vector<Operand> operands_;
    std::vector<Range> ranges_;
    std::optional<c10::Device> target_;
    std::optional<c10::Device> device_arg_;
};

// A view op's result would have to alias device memory; a CPU copy would
// silently stop being a view.
void refuse_views(const c10::OperatorHandle &op) {
    for (const c10::Argument &ret : op.schema().returns()) {
        const c10::AliasInfo *alias = ret.alias_info();
        if (alias && !alias->isWrite())
            TORCH_CHECK(false, "The operator ", op.schema().operator_name(),
                        " appears to be a view operator, but it has no implementation for the "
                        "backend \"neuron\". View operators don't support falling back to run "
                        "on the CPU, since the tensor's storage cannot be shared across devices.");
    }
}

}  // namespace

void run_on_host(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    refuse_views(op);
    HostStage staged(op, *stack);
    staged.stage();
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    staged.commit();
    staged.place_returns();
}

}  // namespace neuron
