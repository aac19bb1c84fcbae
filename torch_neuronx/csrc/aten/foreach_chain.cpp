// aten/foreach_chain.cpp - the held chain of _foreach_* launches (see
// foreach_chain.h): recording, when a chain ends, its launch, and the
// _C._foreach_chain_* bindings (switch and counters, for tests and benches).
#include "aten/foreach_chain.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

#include "aten/eager_group_impl.h"
#include "runtime/bindings.h"
#include "runtime/trn_check.h"
#include "trn/foreach_chain.h"
#include "trn/metrics.h"
#include "trn/stream_hook.h"

namespace neuron::foreach_chain {
namespace {

// Ops per chain at most: AdamW's step is 8, Adam with amsgrad 9, capturable
// Adam 16; a longer run of foreach ops splits into chains of this size.
constexpr size_t kMaxOps = 32;

struct Chain {
    trn_stream *s = nullptr;
    std::vector<trn_foreach_desc> descs;
    std::vector<std::vector<trn_foreach_tensor>> lists;  // descs[k]'s tensor array
    std::vector<at::Tensor> hold;                // every input tensor of the ops, until the launch
    std::vector<std::vector<at::Tensor>> fresh;  // descs[k]'s new outputs (out-of-place ops)
};

std::mutex &chain_mu() {
    static auto *m = new std::mutex;
    return *m;
}
Chain &held() {
    static auto *c = new Chain;
    return *c;
}
std::atomic<bool> g_held{false};  // held() has ops (read without chain_mu())
std::atomic<int> g_switch{-1};    // -1: read TORCH_NEURONX_FOREACH_CHAIN on first use

bool switched_on() {
    int e = g_switch.load(std::memory_order_relaxed);
    if (e < 0) {
        e = 1;
        const char *v = std::getenv("TORCH_NEURONX_FOREACH_CHAIN");
        if (v != nullptr && *v != '\0') {
            std::string s(v);
            for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            e = (s == "0" || s == "false" || s == "no" || s == "off") ? 0 : 1;
        }
        g_switch.store(e);
    }
    return e == 1;
}

// Takes the held chain (empty when it is on another stream than s).
Chain take(trn_stream *s) {
    std::lock_guard<std::mutex> lk(chain_mu());
    Chain &c = held();
    if (c.descs.empty() || (s != nullptr && c.s != s)) return {};
    Chain out = std::move(c);
    c = Chain{};
    g_held.store(false);
    return out;
}

// Whether op k's new outputs are held by the chain alone (so nobody can read
// them after it): each tensor's storage is referenced by that tensor only,
// and the tensor by the chain only, once per operand of the chain's ops
// that points at it (the adapter holds one reference per list operand:
// input lists in `hold`, the out-of-place output list in `fresh`), plus its
// PyObject's when Python no longer holds that. Any reference not counted
// here makes the answer "no": the outputs are then stored, as always.
bool chain_only(const Chain &c, size_t k) {
    const std::vector<at::Tensor> &outs = c.fresh[k];
    if (outs.empty() || outs.size() != c.lists[k].size()) return false;
    for (size_t t = 0; t < outs.size(); t++) {
        const void *p = c.lists[k][t].out;
        if (c.lists[k][t].n == 0) continue;
        const at::Tensor &o = outs[t];
        if (!o.defined() || o.data_ptr() != p || !o.storage() || o.storage().use_count() != 1)
            return false;
        int64_t refs = 0;
        for (size_t j = k; j < c.lists.size(); j++) {
            const trn_foreach_tensor &x = c.lists[j][t];
            refs += (x.out == p) + (x.a == p) + (x.b == p) + (x.c == p);
        }
        // A tensor Python has seen has a PyObject, which holds one reference
        // and, while C++ holds the tensor, is held by it: then no Python
        // reference is left when the tensor holds the PyObject's only one.
        const c10::impl::PyObjectSlot *slot = o.unsafeGetTensorImpl()->pyobj_slot();
        if (slot->load_pyobj() != nullptr) {
            if (!slot->has_unique_reference()) return false;
            refs++;
        }
        if (static_cast<int64_t>(o.use_count()) != refs) return false;
    }
    return true;
}

// Launches c on its stream, without chain_mu() held: the launch passes the
// stream's pending hook, which may call flush().
void launch(Chain &c) {
    if (c.descs.empty()) return;
    std::vector<unsigned char> scratch(c.descs.size(), 0);
    int64_t nscratch = 0;
    for (size_t k = 0; k < c.descs.size(); k++) {
        c.descs[k].tensors = c.lists[k].data();
        scratch[k] = c.descs.size() > 1 && chain_only(c, k);
        nscratch += scratch[k];
    }
    TRN_CHECK(trn_foreach_chain_launch(c.s, c.descs.data(), static_cast<int64_t>(c.descs.size()),
                                       scratch.data()));
    if (c.descs.size() > 1) {
        trn_named_counter_add("ForeachChains", 1);
        trn_named_counter_add("ForeachChainedOps", static_cast<int64_t>(c.descs.size()));
        if (nscratch > 0) trn_named_counter_add("ForeachChainScratchLists", nscratch);
    }
}

// Whether list ts may follow the held chain's ops in one chunk-major run.
bool joins(const Chain &c, trn_stream *s, const std::vector<trn_foreach_tensor> &ts) {
    if (c.s != s || c.descs.size() >= kMaxOps || c.lists[0].size() != ts.size()) return false;
    for (size_t i = 0; i < ts.size(); i++)
        if (c.lists[0][i].n != ts[i].n) return false;
    return true;
}

}  // namespace

void flush(trn_stream *s) {
    if (!g_held.load(std::memory_order_relaxed)) return;
    Chain c = take(s);
    launch(c);
}

bool wanted(trn_foreach_op op) {
    return op != TRN_FOREACH_NORM && switched_on() && eager_group::detail::fusion_on();
}

bool offer(trn_stream *s, const trn_foreach_desc &d, std::vector<trn_foreach_tensor> &&ts,
           std::vector<at::Tensor> &&hold, std::vector<at::Tensor> &&fresh) {
    if (ts.empty() || !wanted(d.op)) return false;
    // An open Adaptive Eager group holds earlier ops: they run first.
    if (eager_group::detail::g_open.load()) {
        std::lock_guard<std::recursive_mutex> lk(eager_group::detail::group_mu());
        eager_group::detail::flush(eager_group::End::Op);
    }
    eager_group::detail::install_hook();
    bool ends = false;
    {
        std::lock_guard<std::mutex> lk(chain_mu());
        ends = !held().descs.empty() && !joins(held(), s, ts);
    }
    if (ends) flush(nullptr);
    std::lock_guard<std::mutex> lk(chain_mu());
    Chain &c = held();
    c.s = s;
    c.descs.push_back(d);
    c.lists.push_back(std::move(ts));
    c.hold.insert(c.hold.end(), std::make_move_iterator(hold.begin()),
                  std::make_move_iterator(hold.end()));
    c.fresh.push_back(std::move(fresh));
    g_held.store(true);
    trn_stream_mark_pending(s);
    return true;
}

namespace {

BindingsRegistrar reg([](pybind11::module_ &m) {
    m.def("_foreach_chain_set_enabled", [](bool on) {
        guarded([&] {
            if (!on) flush(nullptr);
            g_switch.store(on ? 1 : 0);
        });
    });
    m.def("_foreach_chain_enabled", [] { return switched_on(); });
    // Whether a chain is held now (not yet launched): for tests of what ends one.
    m.def("_foreach_chain_held", [] { return g_held.load(); });
    // Chain tasks run chunk-major and op by op (operands overlapped) so far.
    m.def("_foreach_chain_counts", [] {
        int64_t fused = 0, unfused = 0;
        trn_foreach_chain_counts(&fused, &unfused);
        return pybind11::make_tuple(fused, unfused);
    });
});

}  // namespace
}  // namespace neuron::foreach_chain
