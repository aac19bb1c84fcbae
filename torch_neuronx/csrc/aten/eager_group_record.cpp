// aten/eager_group_record.cpp - Adaptive Eager's recorder (see eager_group.h,
// eager_group_impl.h and docs/adaptive-eager.md): the switches, which ops
// qualify, and the open group they join.
//
// A group is a run of elementwise ops over one iteration shape on one
// stream. Each recorded op keeps its descriptor (op, dtypes, byte strides,
// CPU scalars already read) and a reference to every storage it touches, so
// no buffer is freed or reused while the group is open. Buffers are access
// signatures (pointer, dtype, strides); a storage the group writes must be
// accessed through one signature only, so that one fused loop reads and
// writes each element in the order the unfused ops would (otherwise the
// group ends: End::Alias).
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "aten/eager_group_impl.h"
#include "aten/foreach_chain.h"
#include "runtime/device.h"
#include "trn/stream_hook.h"

namespace neuron::eager_group {

const char *end_name(End e) {
    static const char *const names[] = {"host_read", "sync",  "op",     "fallback", "collective",
                                        "alias",     "shape", "stream", "cap",      "off"};
    const int i = static_cast<int>(e);
    return i >= 0 && i < static_cast<int>(End::Count) ? names[i] : "unknown";
}

namespace detail {

thread_local int tl_hint = -1;
std::atomic<int> g_enabled{-1};
std::atomic<bool> g_open{false};

namespace {

bool env_on() {
    // TORCH_NEURONX_EAGER_FUSION (ours); TorchNeuron's internal switch
    // TORCH_NEURONX_ENABLE_CONCATENATION is read the same way when ours is unset.
    // Only an explicit 0 / false / no / off turns it off.
    for (const char *name : {"TORCH_NEURONX_EAGER_FUSION", "TORCH_NEURONX_ENABLE_CONCATENATION"}) {
        const char *v = std::getenv(name);
        if (v == nullptr || *v == '\0') continue;
        std::string s(v);
        for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return !(s == "0" || s == "false" || s == "no" || s == "off");
    }
    return true;  // default: on, as TorchNeuron's Adaptive Eager Execution
}

}  // namespace

bool switched_on() {
    int e = g_enabled.load(std::memory_order_relaxed);
    if (e < 0) {
        e = env_on() ? 1 : 0;
        g_enabled.store(e);
    }
    return e == 1;
}

// PyTorch's switch: use_deterministic_algorithms(True) and every nonzero
// set_deterministic_debug_mode (which sets it) turn fusion off.
bool fusion_on() { return switched_on() && !at::globalContext().deterministicAlgorithms(); }

std::recursive_mutex &group_mu() {
    static auto *m = new std::recursive_mutex;
    return *m;
}
Group &open_group() {
    static auto *g = new Group;
    return *g;
}
StartSigs &start_sigs() {
    static auto *s = new StartSigs;
    return *s;
}

namespace {

// 2048 x 8 bytes: decode's lone signatures (a few hundred per token, the
// KV cache's growing shapes among them) with few collisions; 0 marks a free
// slot (a signature of 0 is never learnt).
constexpr size_t kLoneSlots = 2048;
std::atomic<uint64_t> g_lone[kLoneSlots];

std::atomic<uint64_t> &lone_slot(uint64_t sig) { return g_lone[(sig ^ (sig >> 32)) % kLoneSlots]; }

}  // namespace

bool lone_known(uint64_t sig) {
    return sig != 0 && lone_slot(sig).load(std::memory_order_relaxed) == sig;
}
void lone_learn(uint64_t sig) {
    if (sig != 0) lone_slot(sig).store(sig, std::memory_order_relaxed);
}
void lone_forget(uint64_t sig) {
    std::atomic<uint64_t> &slot = lone_slot(sig);
    if (slot.load(std::memory_order_relaxed) == sig) slot.store(0, std::memory_order_relaxed);
}
void lone_forget_all() {
    for (auto &slot : g_lone) slot.store(0, std::memory_order_relaxed);
}

namespace {

// One multiply per field (each at most 8 bytes), not per byte: start_sig
// runs for every offered op, and a byte-wise hash of its ~150 bytes was a
// chain of ~150 dependent multiplies.
struct Hasher {
    uint64_t h = 1469598103934665603ull;
    template <typename T> void add(const T &v) {
        static_assert(sizeof v <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
        uint64_t w = 0;
        std::memcpy(&w, &v, sizeof v);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
};

}  // namespace

// The small fields go in two packed words (op, dtypes, counts, which
// operands are scalars, which params are nonzero) and only nonzero params are
// hashed: a decode op's signature is ~7 multiplies, not ~20 (it is computed
// for every offered op, most of them lone). A collision only decides whether
// an op is recorded or launched at once, never its result.
uint64_t start_sig(const Op &op, int ndim, const int64_t *sizes, const OperandView *in,
                   const OperandView &out) {
    static_assert(TRN_EW_OP_COUNT < (1 << 16) && TRN_MAX_DIMS < 128);
    auto bits = [](const OperandView &v) -> uint64_t {
        return (static_cast<uint64_t>(static_cast<uint8_t>(v.dtype)) << 1) |
               (v.strides != nullptr ? 1u : 0u);
    };
    uint64_t params = 0;
    for (int k = 0; k < 4; k++) params |= static_cast<uint64_t>(op.params[k] != 0.0) << k;
    Hasher h;
    h.add(static_cast<uint64_t>(static_cast<uint16_t>(op.op)) |
          static_cast<uint64_t>(static_cast<uint8_t>(op.compute)) << 16 |
          static_cast<uint64_t>(static_cast<uint8_t>(op.out_dtype)) << 24 |
          static_cast<uint64_t>(op.n_in & 3) << 32 | static_cast<uint64_t>(ndim & 127) << 34 |
          static_cast<uint64_t>(op.cast) << 41 | params << 42 | bits(out) << 46);
    uint64_t views = 0;
    for (int i = 0; i < op.n_in; i++) views |= bits(in[i]) << (9 * i);
    h.add(views);
    for (int d = 0; d < ndim; d++) h.add(sizes[d]);
    for (int k = 0; k < 4; k++)
        if (op.params[k] != 0.0) h.add(op.params[k]);
    if (out.strides != nullptr)
        for (int d = 0; d < ndim; d++) h.add(out.strides[d]);
    for (int i = 0; i < op.n_in; i++) {
        if (in[i].strides != nullptr)
            for (int d = 0; d < ndim; d++) h.add(in[i].strides[d]);
        else
            h.add(op.in[i].scalar.i);
    }
    return h.h;
}

// ---- eligibility ------------------------------------------------------------------------

bool is16(trn_dtype d) { return d == TRN_DTYPE_F16 || d == TRN_DTYPE_BF16; }
bool is_float(trn_dtype d) { return d == TRN_DTYPE_F32 || is16(d); }

bool element_strides(int ndim, const int64_t *bytes, trn_dtype d, int64_t *out) {
    const int64_t es = static_cast<int64_t>(trn_dtype_size(d));
    if (es > 0 && (es & (es - 1)) == 0) {
        // Every element size is a power of two: a mask and a shift, not two
        // integer divisions per dim (this runs for each operand of each
        // offered op, and the divisions were most of offer_ew's own time).
        const int shift = __builtin_ctzll(static_cast<unsigned long long>(es));
        for (int i = 0; i < ndim; i++) {
            if (bytes[i] < 0 || (bytes[i] & (es - 1)) != 0) return false;
            out[i] = bytes[i] >> shift;
        }
        return true;
    }
    for (int i = 0; i < ndim; i++) {
        if (es <= 0 || bytes[i] < 0 || bytes[i] % es != 0) return false;
        out[i] = bytes[i] / es;
    }
    return true;
}

namespace {

bool fusible_dtype(trn_dtype d) {
    switch (d) {
    case TRN_DTYPE_F32:
    case TRN_DTYPE_F16:
    case TRN_DTYPE_BF16:
    case TRN_DTYPE_I64:
    case TRN_DTYPE_I32:
    case TRN_DTYPE_I16:
    case TRN_DTYPE_I8:
    case TRN_DTYPE_U8:
    case TRN_DTYPE_BOOL: return true;
    default: return false;  // float64 (computed in float32 by default), float8, unsigned
    }
}

// Whether the element strides of a written buffer are dense and
// non-overlapping (trn_graph_export / trn_graph_store need it).
bool dense(int ndim, const int64_t *sizes, const int64_t *strides) {
    std::array<int, TRN_MAX_DIMS> order{};
    int k = 0;
    for (int i = 0; i < ndim; i++)
        if (sizes[i] > 1) order[k++] = i;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; j--)
            std::swap(order[j], order[j - 1]);
    int64_t expect = 1;
    for (int i = 0; i < k; i++) {
        if (strides[order[i]] != expect) return false;
        expect *= sizes[order[i]];
    }
    return true;
}

bool op_fusible(const trn_ew_desc &d) {
    if (d.ndim < 1 || d.ndim > TRN_MAX_DIMS) return false;
    // Floating compute only: generated code keeps integer values in int64
    // registers, so an int32 op would not wrap where the eager kernel does.
    if (!is_float(d.dtype) || !(is_float(d.out_dtype) || d.out_dtype == TRN_DTYPE_BOOL))
        return false;
    // ATen's 16-bit add/sub with alpha != 1 rounds differently in its vector
    // body and its tail (trn_ew_desc.cpu_block), which the fused loop does not
    // reproduce; 16-bit ops with a CPU scalar read it in float32 (opmath).
    if (is16(d.dtype) && (d.op == TRN_EW_ADD || d.op == TRN_EW_SUB) && d.params[0] != 1.0)
        return false;
    const int n_in = trn_ew_op_arity(d.op);
    int64_t tmp[TRN_MAX_DIMS];
    for (int i = 0; i < n_in; i++) {
        if (d.in[i] == nullptr) {
            if (is16(d.dtype)) return false;
            continue;
        }
        if (!fusible_dtype(d.in_dtype[i])) return false;
        if (!element_strides(d.ndim, d.in_strides[i], d.in_dtype[i], tmp)) return false;
    }
    if (!element_strides(d.ndim, d.out_strides, d.out_dtype, tmp)) return false;
    return dense(d.ndim, d.sizes, tmp);
}

bool same_sig(const Buf &b, const void *ptr, trn_dtype dt, const int64_t *strides, int ndim) {
    if (b.ptr != ptr || b.dtype != dt) return false;
    for (int i = 0; i < ndim; i++)
        if (b.strides[i] != strides[i]) return false;
    return true;
}

int storage_index(const Group &g, const c10::StorageImpl *impl) {
    for (size_t i = 0; i < g.impls.size(); i++)
        if (g.impls[i] == impl) return static_cast<int>(i);
    return -1;
}

int add_storage(Group &g, const c10::Storage &st) {
    g.storages.push_back(st);
    g.impls.push_back(st.unsafeGetStorageImpl());
    g.st_written.push_back(0);
    g.st_created.push_back(0);
    g.st_bufs.emplace_back();
    return static_cast<int>(g.storages.size() - 1);
}

// The access of one operand, before it is added. The storage is borrowed
// from the caller's tensor (alive for the offer): no reference count is
// taken unless the group keeps it (add_storage).
struct Access {
    const void *ptr;
    trn_dtype dtype;
    const int64_t *strides;
    const c10::Storage *storage;
    bool write;
};
using Accesses = c10::SmallVector<Access, 4>;  // output first, then inputs

}  // namespace

namespace {

// Per device (the first kPeakDevices): the peak last seen and what replays
// added to it. A peak below the one seen was reset (reset_peak_memory_stats):
// what replays added before is gone with it.
constexpr int kPeakDevices = 16;
struct ReplayExcess {
    size_t seen = 0, bytes = 0;
};
ReplayExcess g_excess[kPeakDevices];

}  // namespace

size_t reference_peak(int device, size_t peak) {
    if (device < 0 || device >= kPeakDevices) return peak;
    ReplayExcess &r = g_excess[device];
    if (peak < r.seen) r.bytes = 0;
    r.seen = peak;
    return peak - std::min(r.bytes, peak);
}

void replay_raised_peak(int device, size_t peak_before, size_t peak_after) {
    if (device < 0 || device >= kPeakDevices) return;
    reference_peak(device, peak_before);
    if (peak_after > peak_before) g_excess[device].bytes += peak_after - peak_before;
    g_excess[device].seen = peak_after;
}

void release_dead(Group &g) {
    for (size_t si = 0; si < g.storages.size(); si++) {
        if (!g.st_created[si] || !g.storages[si] || g.storages[si].use_count() > 1) continue;
        // Nobody but the group can reach it: its contents matter only to the
        // group's own later ops. The impl goes too, so a new storage that
        // reuses its address is a new storage to the group.
        g.held_bytes -= std::min(g.held_bytes, g.storages[si].nbytes());
        g.storages[si] = c10::Storage();
        g.impls[si] = nullptr;
    }
}

namespace {

bool over_held_bytes(const Group &g, const Access &out) {
    return storage_index(g, out.storage->unsafeGetStorageImpl()) < 0 &&
           g.held_bytes + out.storage->nbytes() > kMaxHeldBytes;
}

// Whether adding these accesses keeps every written storage behind a single
// signature.
bool alias_safe(const Group &g, const Accesses &acc) {
    const int nd = g.ndim;
    for (size_t a = 0; a < acc.size(); a++) {
        const auto *impl = acc[a].storage->unsafeGetStorageImpl();
        const int si = storage_index(g, impl);
        bool written = acc[a].write || (si >= 0 && g.st_written[si]);
        for (size_t b = 0; b < acc.size(); b++)
            if (acc[b].storage->unsafeGetStorageImpl() == impl && acc[b].write) written = true;
        if (!written) continue;
        // The group's buffers of this storage: at most one, with this signature.
        if (si >= 0) {
            if (g.st_bufs[si].size() > 1) return false;
            if (g.st_bufs[si].size() == 1 &&
                !same_sig(g.bufs[g.st_bufs[si][0]], acc[a].ptr, acc[a].dtype, acc[a].strides, nd))
                return false;
        }
        for (size_t b = 0; b < acc.size(); b++) {
            if (acc[b].storage->unsafeGetStorageImpl() != impl) continue;
            if (acc[b].ptr != acc[a].ptr || acc[b].dtype != acc[a].dtype) return false;
            for (int i = 0; i < nd; i++)
                if (acc[b].strides[i] != acc[a].strides[i]) return false;
        }
    }
    return true;
}

int buf_index(Group &g, const Access &a) {
    int si = storage_index(g, a.storage->unsafeGetStorageImpl());
    if (si >= 0) {
        for (int i : g.st_bufs[si])
            if (same_sig(g.bufs[i], a.ptr, a.dtype, a.strides, g.ndim)) return i;
    } else {
        si = add_storage(g, *a.storage);
    }
    Buf b;
    b.ptr = const_cast<void *>(a.ptr);
    b.dtype = a.dtype;
    b.strides.fill(0);
    for (int i = 0; i < g.ndim; i++) b.strides[i] = a.strides[i];
    b.storage = si;
    b.read_first = !a.write;
    g.bufs.push_back(b);
    const int idx = static_cast<int>(g.bufs.size() - 1);
    g.st_bufs[si].push_back(idx);
    return idx;
}

End hint_or(End fallback) { return tl_hint >= 0 ? static_cast<End>(tl_hint) : fallback; }

trn_status pending_hook(trn_stream *s, int why, char *msg, size_t msg_size) {
    try {
        foreach_chain::flush(s);  // held foreach ops (never held with an open group)
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        if (open_group().s == s) flush(hint_or(why == TRN_PENDING_SYNC ? End::Sync : End::Op));
        return TRN_SUCCESS;
    } catch (const std::exception &ex) {
        std::snprintf(msg, msg_size, "%s", ex.what());
        return TRN_ERROR_KERNEL;
    }
}

}  // namespace

void install_hook() {
    // Every recorded op asks: after the first, one acquire load (std::call_once
    // is a pthread_once call each time).
    static std::atomic<bool> installed{false};
    if (installed.load(std::memory_order_acquire)) return;
    static std::once_flag once;
    std::call_once(once, [] { trn_stream_set_pending_hook(pending_hook); });
    installed.store(true, std::memory_order_release);
}

}  // namespace detail

using namespace detail;

void release_dead_storages(size_t nbytes) {
    if (!g_open.load(std::memory_order_relaxed)) return;
    // Fusion's cost, not the allocation's: counted as recording time, so the
    // adaptive trials weigh it (with fusion off this check does not run).
    const int64_t t0 = adaptive_clock();
    std::lock_guard<std::recursive_mutex> lk(group_mu());
    Group &g = open_group();
    if (g.empty()) return;
    struct Charge {
        Group &g;
        int64_t t0;
        ~Charge() {
            if (t0 != 0 && !g.empty()) g.record_ns += now_ns() - t0;
        }
    } charge{g, t0};
    release_dead(g);
    // Inputs only the group still holds (saved activations autograd has let
    // go of, a gradient already consumed) are what fusing still costs in
    // memory: their reads wait for the fused run. They are kept while this
    // allocation leaves the memory in use within the peak the device has
    // already reached: a training step's backward runs below its forward's
    // peak except near where the peak is (GPT-2's tanh-GELU backward is then
    // one group in every layer but the last). There the group runs now and its
    // dead inputs are freed before this allocation, so fusion does not raise
    // the peak. Up to kMinDeadInputBytes may cross it: the peak then stays
    // within that of unfused execution's (a budget relative to the memory in
    // use, as before, let each step's crossing raise the peak the next step
    // compared with: GPT-2's all-time peak crept up 6 MiB over five steps).
    size_t dead = 0;
    for (size_t si = 0; si < g.storages.size(); si++)
        if (!g.st_created[si] && g.storages[si].use_count() == 1) dead += g.storages[si].nbytes();
    if (dead <= kMinDeadInputBytes) return;
    trn_mem_stats st{};
    if (trn_mem_get_stats(trn_stream_device(g.s), &st) != TRN_SUCCESS) {
        trn_clear_error();
        return;
    }
    // The allocator's blocks are whole granules (allocated_bytes counts them).
    const size_t block = (nbytes + kAllocGranule - 1) / kAllocGranule * kAllocGranule;
    if (st.allocated_bytes + block <=
        reference_peak(trn_stream_device(g.s), st.allocated_bytes_peak))
        return;
    flush(End::Cap);
}

// The outermost hint wins: a fallback's host copies end a group as a fallback.
EndHint::EndHint(End e) : prev_(tl_hint) {
    if (prev_ < 0) tl_hint = static_cast<int>(e);
}
EndHint::~EndHint() { tl_hint = prev_; }

namespace {

bool switched_off_now() {
    if (fusion_on()) return false;
    if (g_open.load(std::memory_order_relaxed)) {
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        flush(End::Off);
    }
    return true;
}

// op's start signature (operands still indexing acc).
uint64_t offered_sig(int ndim, const int64_t *sizes, const Accesses &acc, const Op &op) {
    OperandView in[3]{};
    for (int i = 0; i < op.n_in; i++)
        in[i] = op.in[i].buf < 0 ? OperandView{op.in[i].dtype, nullptr}
                                 : OperandView{acc[op.in[i].buf].dtype, acc[op.in[i].buf].strides};
    return start_sig(op, ndim, sizes, in, OperandView{acc[0].dtype, acc[0].strides});
}

// Whether op starts no group (StartSigs, group_mu() held): then it is launched
// at once, as with fusion off. sig: its signature, 0 if not computed yet.
bool starts_no_group(int ndim, const int64_t *sizes, const Accesses &acc, const Op &op,
                     uint64_t sig) {
    const StartSigs &ss = start_sigs();
    if ((ss.declined.empty() && ss.single.empty()) ||
        g_adaptive.load(std::memory_order_relaxed) == kAdaptiveOff)
        return false;
    if (sig == 0) sig = offered_sig(ndim, sizes, acc, op);
    bool lone = ss.declined.count(sig) != 0 && ss.wanted.count(sig) == 0;
    if (!lone) {
        const auto it = ss.single.find(sig);
        lone = it != ss.single.end() && it->second >= 2 && ss.multi.count(sig) == 0;
    }
    if (lone) lone_learn(sig);
    return lone;
}

// Adds one op over (ndim, sizes) to the open group, ending it first when the
// op cannot join (another stream or shape, an alias hazard, the caps).
// acc[0] is the output; op.in[i].buf holds, for tensor operands, the index
// into acc of the input (replaced by its buffer here).
//
// The recording time (Group::record_ns, adaptive only) runs from the offer's
// operand checks (t_in; 0: from here) and counts only for ops that join a
// group; lone ops (lone_known, checked before) read no clock. It includes
// the wait for the lock and, with the allocator's dead-storage checks while
// the group is open (release_dead_storages), is what a fused trial adds to
// its run: the adaptive choice must see every host cost that fusion off
// does not pay, or a pattern is kept fused while its ops launch faster.
// sig: op's start signature if the caller has it (no group open then), else 0.
bool record(trn_stream *s, int ndim, const int64_t *sizes, const Accesses &acc, Op op,
            uint64_t sig = 0, int64_t t_in = 0) {
    for (const Access &a : acc)
        if (!*a.storage) return false;
    foreach_chain::flush(nullptr);  // held foreach ops come first
    install_hook();
    // No open group and a signature known to start none: launched at once,
    // without the group lock (decode's lone ops).
    if (sig == 0 && !g_open.load(std::memory_order_acquire) &&
        g_adaptive.load(std::memory_order_relaxed) != kAdaptiveOff) {
        sig = offered_sig(ndim, sizes, acc, op);
        if (lone_known(sig)) return false;
    }
    // From before the lock: waiting for it is part of what recording costs.
    if (t_in == 0) t_in = adaptive_clock();
    std::lock_guard<std::recursive_mutex> lk(group_mu());
    int64_t t0 = 0;
    const bool was_open = !open_group().empty();
    if (was_open) {
        t0 = t_in;
        bool same_shape = open_group().ndim == ndim;
        for (int i = 0; same_shape && i < ndim; i++) same_shape = open_group().sizes[i] == sizes[i];
        if (open_group().s != s)
            flush(End::Stream);
        else if (!same_shape)
            flush(End::Shape);
        else if (!alias_safe(open_group(), acc))
            flush(End::Alias);
        else if (open_group().ops.size() >= kMaxOps || over_held_bytes(open_group(), acc[0]))
            flush(End::Cap);
    }
    Group &g = open_group();
    if (g.empty()) {
        if (starts_no_group(ndim, sizes, acc, op, sig)) return false;
        // After any flush above: that is not this op's cost.
        t0 = was_open ? adaptive_clock() : t_in;
        g.s = s;
        g.ndim = ndim;
        g.sizes.fill(0);
        for (int i = 0; i < ndim; i++) g.sizes[i] = sizes[i];
        g.bufs.clear();
        g.storages.clear();
        g.impls.clear();
        g.st_written.clear();
        g.st_created.clear();
        g.st_bufs.clear();
        g.held_bytes = 0;
        if (!alias_safe(g, acc)) return false;
    }
    for (int i = 0; i < op.n_in; i++)
        if (op.in[i].buf >= 0) op.in[i].buf = buf_index(g, acc[op.in[i].buf]);
    // The output last: an in-place op reads its buffer before writing it.
    const bool created = storage_index(g, acc[0].storage->unsafeGetStorageImpl()) < 0;
    if (created) g.held_bytes += acc[0].storage->nbytes();
    op.out = buf_index(g, acc[0]);
    g.bufs[op.out].written = true;
    g.st_written[g.bufs[op.out].storage] = 1;
    if (created) g.st_created[g.bufs[op.out].storage] = 1;
    g.ops.push_back(op);
    release_dead(g);
    if (t0 != 0) g.record_ns += now_ns() - t0;
    g_open.store(true);
    trn_stream_mark_pending(s);
    return true;
}

}  // namespace

bool offer_ew(trn_stream *s, const trn_ew_desc &d, const at::TensorIteratorBase &iter,
              const char *name) {
    if (switched_off_now() || d.ndim < 1 || d.ndim > TRN_MAX_DIMS) return false;
    const int n_in = trn_ew_op_arity(d.op);
    Op op{};
    op.op = d.op;
    op.compute = d.dtype;
    op.out_dtype = d.out_dtype;
    op.n_in = n_in;
    for (int k = 0; k < 4; k++) op.params[k] = d.params[k];
    op.cpu_block = d.cpu_block;
    op.cpu_threads = d.cpu_threads;
    op.name = name;
    for (int i = 0; i < n_in; i++) {
        Operand &o = op.in[i];
        if (d.in[i] == nullptr) {
            o.buf = -1;
            o.scalar = d.scalar_in[i];
            o.dtype = (d.op == TRN_EW_WHERE && i == 0) ? TRN_DTYPE_BOOL : d.dtype;
        }
    }
    // A lone op (no group open, its signature known to start none) is
    // launched at once, before the fusibility checks and operand accesses:
    // only a fusible op's signature is ever learnt.
    uint64_t sig = 0;
    if (!g_open.load(std::memory_order_acquire) &&
        g_adaptive.load(std::memory_order_relaxed) != kAdaptiveOff) {
        OperandView in[3]{};
        for (int i = 0; i < n_in; i++)
            in[i] = d.in[i] == nullptr ? OperandView{op.in[i].dtype, nullptr}
                                       : OperandView{d.in_dtype[i], d.in_strides[i]};
        sig = start_sig(op, d.ndim, d.sizes, in, OperandView{d.out_dtype, d.out_strides});
        if (lone_known(sig)) {
            foreach_chain::flush(nullptr);  // held foreach ops still come first
            return false;
        }
    }
    if (!op_fusible(d)) return false;
    // A fusible op that is not lone: from here on its time is recording time
    // (Group::record_ns, counted once it joins a group).
    const int64_t t_in = adaptive_clock();
    // Operand accesses: output 0, then the inputs in kernel slot order (the
    // iterator's args after its outputs, as elementwise.cpp's launch builds d).
    Accesses acc;
    acc.reserve(4);
    acc.push_back({d.out, d.out_dtype, d.out_strides, &iter.tensor_base(0).storage(), true});
    for (int i = 0; i < n_in; i++) {
        if (d.in[i] == nullptr) continue;
        Operand &o = op.in[i];
        const int arg = i + iter.noutputs();
        if (arg >= iter.ntensors() || iter.data_ptr(arg) != d.in[i]) return false;
        o.buf = static_cast<int>(acc.size());
        acc.push_back(
            {d.in[i], d.in_dtype[i], d.in_strides[i], &iter.tensor_base(arg).storage(), false});
    }
    return record(s, d.ndim, d.sizes, acc, op, sig, t_in);
}

bool offer_copy(trn_stream *s, const at::Tensor &dst, const at::Tensor &src) {
    if (switched_off_now()) return false;
    if (src.device() != dst.device() || dst.numel() == 0 || dst.dim() > TRN_MAX_DIMS ||
        src.is_conj() || src.is_neg() || dst.is_conj() || dst.is_neg())
        return false;
    auto dd = native_dtype(dst.scalar_type()), sd = native_dtype(src.scalar_type());
    // A floating destination: generated casts to integer types round as C
    // does, which is only defined where the eager copy's is.
    if (!dd || !sd || !is_float(*dd) || !fusible_dtype(*sd)) return false;
    auto geometry = at::inferExpandGeometry_dimvector(src.sizes(), src.strides(), dst.sizes());
    // Coalesced as TensorIterator coalesces (row-major, size-1 dims dropped,
    // a dim merged into the next when every operand's strides allow), so a
    // copy of contiguous tensors has the elementwise ops' 1-d shape.
    int64_t sizes[TRN_MAX_DIMS], dstr[TRN_MAX_DIMS], sstr[TRN_MAX_DIMS];
    int nd = 0;
    for (int64_t i = 0; i < dst.dim(); i++) {
        const int64_t n = dst.size(i), ds = dst.stride(i), ss = geometry.strides[i];
        if (n == 1) continue;
        if (nd > 0 && dstr[nd - 1] == ds * n && sstr[nd - 1] == ss * n) {
            sizes[nd - 1] *= n;
            dstr[nd - 1] = ds;
            sstr[nd - 1] = ss;
            continue;
        }
        sizes[nd] = n;
        dstr[nd] = ds;
        sstr[nd] = ss;
        nd++;
    }
    if (nd == 0) return false;  // one element: nothing to fuse
    if (!dense(nd, sizes, dstr)) return false;
    int64_t dbytes[TRN_MAX_DIMS], sbytes[TRN_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        if (sstr[i] < 0 || dstr[i] < 0) return false;
        dbytes[i] = dstr[i] * static_cast<int64_t>(trn_dtype_size(*dd));
        sbytes[i] = sstr[i] * static_cast<int64_t>(trn_dtype_size(*sd));
    }
    Accesses acc;
    acc.push_back({dst.data_ptr(), *dd, dbytes, &dst.storage(), true});
    acc.push_back({src.const_data_ptr(), *sd, sbytes, &src.storage(), false});
    Op op{};
    op.cast = true;
    op.op = TRN_EW_OP_COUNT;
    op.compute = *dd;
    op.out_dtype = *dd;
    op.n_in = 1;
    op.in[0].buf = 1;
    op.name = "aten::_copy_from";
    return record(s, nd, sizes, acc, op);
}

}  // namespace neuron::eager_group
