// aten/eager_group.cpp - Adaptive Eager Execution (see eager_group.h and
// docs/adaptive-eager.md).
//
// A group is a run of elementwise ops over one iteration shape on one
// stream. Each recorded op keeps its descriptor (op, dtypes, byte strides,
// CPU scalars already read) and a reference to every storage it touches, so
// no buffer is freed or reused while the group is open. Buffers are access
// signatures (pointer, dtype, strides); a storage the group writes must be
// accessed through one signature only, so that one fused loop reads and
// writes each element in the order the unfused ops would (otherwise the
// group ends: End::Alias).
//
// At the end (flush) the group is keyed by its pattern (no pointers) and
// either runs as the compiled program of that key, or, until that program
// exists, replays its ops one by one exactly as they would have launched.
// The second time a key is seen its graph is built (the same trn_graph_*
// calls torch.compile's lowering makes) and compiled on a background
// thread, through the compile cache's disk directory: no op ever waits for
// the C compiler.
#include "aten/eager_group.h"

#include <ATen/Context.h>
#include <pthread.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/Storage.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <pybind11/stl.h>

#include "runtime/bindings.h"
#include "runtime/device.h"
#include "trn/compiler.h"
#include "trn/copy.h"
#include "trn/metrics.h"
#include "trn/stream_hook.h"
#include "trn/trace.h"

namespace neuron::eager_group {

const char *end_name(End e) {
    static const char *const names[] = {"host_read", "sync",  "op",     "fallback", "collective",
                                        "alias",     "shape", "stream", "cap",      "off"};
    const int i = static_cast<int>(e);
    return i >= 0 && i < static_cast<int>(End::Count) ? names[i] : "unknown";
}

namespace {

constexpr size_t kMaxOps = 64;    // group size cap (End::Cap)
constexpr int kCompileAfter = 2;  // a pattern compiles when seen this often
constexpr size_t kMaxPatterns = 4096;
// The group keeps its outputs' memory until it runs (intermediates that
// unfused execution would free at once): bounded, as a size cap (End::Cap).
constexpr size_t kMaxHeldBytes = size_t{1} << 30;

thread_local int tl_hint = -1;

// ---- switches and settings -------------------------------------------------------------

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

std::atomic<int> g_enabled{-1};  // -1: read the environment on first use

struct Settings {
    std::string include_dir;
    std::string cache_dir;  // empty: no disk cache
    int opt_level = 3;      // trn_compile_options.opt_level (-O2)
    std::string cc_flags;
    double lock_timeout_s = 0;
    int64_t cache_max_bytes = 0;
    bool configured = false;
};

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

// ---- recorded group ---------------------------------------------------------------------

struct Buf {
    void *ptr;
    trn_dtype dtype;
    std::array<int64_t, TRN_MAX_DIMS> strides;  // bytes
    int storage;
    bool read_first = false;
    bool written = false;
};

struct Operand {
    int buf = -1;  // -1: a scalar
    trn_scalar scalar{};
    trn_dtype dtype = TRN_DTYPE_F32;  // the scalar's dtype as the kernel reads it
};

struct Op {
    bool cast = false;  // a copy / dtype conversion (trn_copy_launch), else trn_ew_launch
    trn_ew_op op;
    trn_dtype compute, out_dtype;
    int out;
    int n_in;
    std::array<Operand, 3> in;
    std::array<double, 4> params;
    int64_t cpu_block;
    int cpu_threads;
    const char *name;
};

struct Group {
    trn_stream *s = nullptr;
    int ndim = 0;
    std::array<int64_t, TRN_MAX_DIMS> sizes{};
    std::vector<Buf> bufs;
    std::vector<c10::Storage> storages;
    std::vector<Op> ops;
    size_t held_bytes = 0;  // of the storages the group's outputs created
    bool empty() const { return ops.empty(); }
};

// The group and its lock, never destroyed (a group open at exit is dropped).
std::recursive_mutex &group_mu() {
    static auto *m = new std::recursive_mutex;
    return *m;
}
Group &open_group() {
    static auto *g = new Group;
    return *g;
}
std::atomic<bool> g_open{false};  // open_group() has ops (read without group_mu())

// ---- pattern cache ----------------------------------------------------------------------

struct Entry {
    int seen = 0;
    enum State { Unbuilt, Compiling, Ready, Failed } state = Unbuilt;
    trn_program *prog = nullptr;
    std::vector<int> node;  // per buffer: the node whose buffer it is, -1: none
    void *workspace = nullptr;
};

struct Job {
    std::shared_ptr<Entry> entry;
    trn_graph *graph = nullptr;
};

// Never destroyed: the compile thread is detached and may still wait on the
// condition variable while the process exits.
struct Cache {
    std::mutex mu;
    std::condition_variable cv;
    std::unordered_map<std::string, std::shared_ptr<Entry>> map;
    Settings settings;
    int compiling = 0;
    std::deque<Job> jobs;
    bool worker_started = false;
};
Cache *g_cache_ptr = nullptr;
std::once_flag g_cache_once;

// A forked child has no compile thread (and may have forked while it held
// the lock): it starts from an empty cache, the parent's left as it was.
void cache_after_fork_child() { g_cache_ptr = new Cache; }

Cache &cache() {
    std::call_once(g_cache_once, [] {
        g_cache_ptr = new Cache;
        pthread_atfork(nullptr, nullptr, cache_after_fork_child);
    });
    return *g_cache_ptr;
}

struct LogRecord {
    int n_ops;
    End end;
    bool fused;
    std::string ops;
};
std::deque<LogRecord> g_log;  // under group_mu()
constexpr size_t kLogMax = 256;

void count(const std::string &name, int64_t n = 1) { trn_named_counter_add(name.c_str(), n); }

// ---- eligibility ------------------------------------------------------------------------

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

bool is16(trn_dtype d) { return d == TRN_DTYPE_F16 || d == TRN_DTYPE_BF16; }
bool is_float(trn_dtype d) { return d == TRN_DTYPE_F32 || is16(d); }

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

bool element_strides(int ndim, const int64_t *bytes, trn_dtype d, int64_t *out) {
    const int64_t es = static_cast<int64_t>(trn_dtype_size(d));
    for (int i = 0; i < ndim; i++) {
        if (bytes[i] < 0 || bytes[i] % es != 0) return false;
        out[i] = bytes[i] / es;
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

int storage_index(Group &g, const c10::Storage &st, bool add) {
    for (size_t i = 0; i < g.storages.size(); i++)
        if (g.storages[i].unsafeGetStorageImpl() == st.unsafeGetStorageImpl())
            return static_cast<int>(i);
    if (!add) return -1;
    g.storages.push_back(st);
    return static_cast<int>(g.storages.size() - 1);
}

struct Access;
bool over_held_bytes(Group &g, const Access &out);

// The access of one operand, before it is added.
struct Access {
    const void *ptr;
    trn_dtype dtype;
    const int64_t *strides;
    c10::Storage storage;
    bool write;
};

bool over_held_bytes(Group &g, const Access &out) {
    return storage_index(g, out.storage, false) < 0 &&
           g.held_bytes + out.storage.nbytes() > kMaxHeldBytes;
}

// Whether adding these accesses keeps every written storage behind a single
// signature.
bool alias_safe(const Group &g, const std::vector<Access> &acc) {
    const int nd = g.ndim;
    for (size_t a = 0; a < acc.size(); a++) {
        const auto *impl = acc[a].storage.unsafeGetStorageImpl();
        bool written = acc[a].write;
        for (size_t b = 0; b < acc.size(); b++)
            if (acc[b].storage.unsafeGetStorageImpl() == impl && acc[b].write) written = true;
        for (const Buf &b : g.bufs)
            if (g.storages[b.storage].unsafeGetStorageImpl() == impl && b.written) written = true;
        if (!written) continue;
        for (const Buf &b : g.bufs)
            if (g.storages[b.storage].unsafeGetStorageImpl() == impl &&
                !same_sig(b, acc[a].ptr, acc[a].dtype, acc[a].strides, nd))
                return false;
        for (size_t b = 0; b < acc.size(); b++) {
            if (acc[b].storage.unsafeGetStorageImpl() != impl) continue;
            if (acc[b].ptr != acc[a].ptr || acc[b].dtype != acc[a].dtype) return false;
            for (int i = 0; i < nd; i++)
                if (acc[b].strides[i] != acc[a].strides[i]) return false;
        }
    }
    return true;
}

int buf_index(Group &g, const Access &a) {
    for (size_t i = 0; i < g.bufs.size(); i++)
        if (same_sig(g.bufs[i], a.ptr, a.dtype, a.strides, g.ndim)) return static_cast<int>(i);
    Buf b;
    b.ptr = const_cast<void *>(a.ptr);
    b.dtype = a.dtype;
    b.strides.fill(0);
    for (int i = 0; i < g.ndim; i++) b.strides[i] = a.strides[i];
    b.storage = storage_index(g, a.storage, true);
    b.read_first = !a.write;
    g.bufs.push_back(b);
    return static_cast<int>(g.bufs.size() - 1);
}

// ---- flush --------------------------------------------------------------------------------

// One recorded op as its own launch, exactly as the adapter would have made it.
void launch_copy_one(const Group &g, const Op &op) {
    const Buf &dst = g.bufs[op.out], &src = g.bufs[op.in[0].buf];
    int64_t ds[TRN_MAX_DIMS], ss[TRN_MAX_DIMS];
    element_strides(g.ndim, dst.strides.data(), dst.dtype, ds);
    element_strides(g.ndim, src.strides.data(), src.dtype, ss);
    trn_copy_desc d{};
    d.ndim = g.ndim;
    d.sizes = g.sizes.data();
    d.dst = dst.ptr;
    d.dst_strides = ds;
    d.dst_dtype = dst.dtype;
    d.src = src.ptr;
    d.src_strides = ss;
    d.src_dtype = src.dtype;
    TRN_CHECK(trn_copy_launch(g.s, &d));
}

void launch_one(const Group &g, const Op &op) {
    if (op.cast) {
        launch_copy_one(g, op);
        return;
    }
    trn_ew_desc d{};
    d.op = op.op;
    d.dtype = op.compute;
    d.ndim = g.ndim;
    d.sizes = g.sizes.data();
    d.out = g.bufs[op.out].ptr;
    d.out_strides = g.bufs[op.out].strides.data();
    d.out_dtype = op.out_dtype;
    for (int k = 0; k < 4; k++) d.params[k] = op.params[k];
    d.cpu_block = op.cpu_block;
    d.cpu_threads = op.cpu_threads;
    for (int i = 0; i < op.n_in; i++) {
        const Operand &o = op.in[i];
        if (o.buf < 0) {
            d.in[i] = nullptr;
            d.scalar_in[i] = o.scalar;
        } else {
            d.in[i] = g.bufs[o.buf].ptr;
            d.in_strides[i] = g.bufs[o.buf].strides.data();
            d.in_dtype[i] = g.bufs[o.buf].dtype;
        }
    }
    // Replayed from a flush that another op's launch started: label it as itself.
    const bool traced = trn_trace_active();
    if (traced) {
        std::string label(op.name);
        if (label.rfind("aten::", 0) == 0) label = "trn::" + label.substr(6);
        trn_trace_push(TRN_ACTIVITY_KERNEL, label.c_str(), "", 0, 0);
    }
    const trn_status st = trn_ew_launch(g.s, &d);
    if (traced) trn_trace_pop();
    TRN_CHECK(st);
}

template <typename T> void put_raw(std::string &k, const T &v) {
    k.append(reinterpret_cast<const char *>(&v), sizeof v);
}

// The pattern: everything the fused program depends on, no addresses.
std::string pattern_key(const Group &g, const std::vector<char> &alive) {
    std::string k;
    k.reserve(64 + 64 * g.ops.size());
    put_raw(k, g.ndim);
    for (int i = 0; i < g.ndim; i++) put_raw(k, g.sizes[i]);
    put_raw(k, g.bufs.size());
    for (size_t b = 0; b < g.bufs.size(); b++) {
        const Buf &x = g.bufs[b];
        put_raw(k, x.dtype);
        for (int i = 0; i < g.ndim; i++) put_raw(k, x.strides[i]);
        const char flags =
            static_cast<char>((x.read_first ? 1 : 0) | (x.written ? 2 : 0) | (alive[b] ? 4 : 0));
        put_raw(k, flags);
    }
    for (const Op &op : g.ops) {
        put_raw(k, op.cast);
        put_raw(k, op.op);
        put_raw(k, op.compute);
        put_raw(k, op.out_dtype);
        put_raw(k, op.out);
        for (double p : op.params) put_raw(k, p);
        for (int i = 0; i < op.n_in; i++) {
            put_raw(k, op.in[i].buf);
            if (op.in[i].buf < 0) {
                put_raw(k, op.in[i].dtype);
                put_raw(k, op.in[i].scalar.i);  // the union's bits
            }
        }
    }
    return k;
}

// The group as a graph (what torch.compile's lower_pointwise.py builds for
// the same ops); node[b]: the node whose buffer buffer b is at run time.
trn_graph *build_graph(const Group &g, const std::vector<char> &alive, std::vector<int> &node) {
    trn_graph *gr = nullptr;
    TRN_CHECK(trn_graph_create(&gr));
    try {
        const int nd = g.ndim;
        std::vector<int> cur(g.bufs.size(), -1), input(g.bufs.size(), -1);
        node.assign(g.bufs.size(), -1);
        int64_t es[TRN_MAX_DIMS];
        for (const Op &op : g.ops) {
            int in[3] = {-1, -1, -1};
            for (int i = 0; i < op.n_in; i++) {
                const Operand &o = op.in[i];
                if (o.buf < 0) {
                    const bool fl = is_float(o.dtype);
                    TRN_CHECK(trn_graph_const(gr, o.dtype, fl ? o.scalar.f : 0.0,
                                              fl ? 0 : o.scalar.i, nd, g.sizes.data(), &in[i]));
                    continue;
                }
                if (cur[o.buf] < 0) {
                    const Buf &b = g.bufs[o.buf];
                    element_strides(nd, b.strides.data(), b.dtype, es);
                    TRN_CHECK(trn_graph_input(gr, b.dtype, nd, g.sizes.data(), es, &cur[o.buf]));
                    input[o.buf] = cur[o.buf];
                }
                in[i] = cur[o.buf];
            }
            if (op.cast)
                TRN_CHECK(trn_graph_cast(gr, in[0], op.out_dtype, &cur[op.out]));
            else
                TRN_CHECK(trn_graph_pointwise(gr, op.op, op.compute, op.out_dtype, op.n_in, in,
                                              op.params.data(), &cur[op.out]));
        }
        for (size_t b = 0; b < g.bufs.size(); b++) {
            const Buf &x = g.bufs[b];
            if (input[b] >= 0) node[b] = input[b];  // read (and maybe stored into)
            if (!x.written) continue;
            if (input[b] >= 0) {
                int st;
                TRN_CHECK(trn_graph_store(gr, input[b], cur[b], &st));
            } else if (alive[b]) {
                element_strides(nd, x.strides.data(), x.dtype, es);
                TRN_CHECK(trn_graph_export(gr, cur[b], es));
                node[b] = cur[b];
            }
        }
    } catch (...) {
        trn_graph_free(gr);
        throw;
    }
    return gr;
}

// The compile settings torch.compile uses (headers, disk cache, -O level,
// flags), asked of torch_neuronx/eager_fusion.py once, from this thread,
// when the first group compiles: nothing is resolved (no cache directory is
// created) in a process that never compiles one.
Settings resolve_settings() {
    Settings s;
    if (Py_IsInitialized() && !_Py_IsFinalizing()) {
        pybind11::gil_scoped_acquire gil;
        try {
            auto t = pybind11::module_::import("torch_neuronx.eager_fusion")
                         .attr("_compile_settings")()
                         .cast<pybind11::tuple>();
            s.include_dir = t[0].cast<std::string>();
            s.cache_dir = t[1].is_none() ? "" : t[1].cast<std::string>();
            s.opt_level = t[2].cast<int>();
            s.cc_flags = t[3].cast<std::string>();
            s.lock_timeout_s = t[4].cast<double>();
            s.cache_max_bytes = t[5].cast<int64_t>();
            s.configured = true;
        } catch (const std::exception &e) {
            TORCH_WARN_ONCE("neuron eager fusion: no compile settings (", e.what(),
                            "); fused groups run unfused");
        }
    }
    std::lock_guard<std::mutex> lk(cache().mu);
    if (!cache().settings.configured) cache().settings = s;
    return cache().settings;
}

void worker_main() {
    for (;;) {
        Job job;
        Settings s;
        {
            std::unique_lock<std::mutex> lk(cache().mu);
            cache().cv.wait(lk, [] { return !cache().jobs.empty(); });
            job = cache().jobs.front();
            cache().jobs.pop_front();
            s = cache().settings;
        }
        if (!s.configured) s = resolve_settings();
        trn_compile_options o{};
        o.include_dir = s.include_dir.c_str();
        o.cache_dir = s.cache_dir.empty() ? nullptr : s.cache_dir.c_str();
        o.name = "eager_group";
        o.opt_level = s.opt_level;
        o.cc_flags = s.cc_flags.c_str();
        o.lock_timeout_s = s.lock_timeout_s;
        o.cache_max_bytes = s.cache_max_bytes;
        trn_program *p = nullptr;
        const trn_status st = trn_program_compile(job.graph, &o, &p);
        std::string why = st == TRN_SUCCESS ? "" : trn_last_error();
        trn_graph_free(job.graph);
        void *ws = nullptr;
        if (st == TRN_SUCCESS && trn_program_workspace_size(p) > 0)
            ws = std::aligned_alloc(64, (trn_program_workspace_size(p) + 63) / 64 * 64);
        {
            std::lock_guard<std::mutex> lk(cache().mu);
            if (st == TRN_SUCCESS && (trn_program_workspace_size(p) == 0 || ws != nullptr)) {
                job.entry->prog = p;
                job.entry->workspace = ws;
                job.entry->state = Entry::Ready;
                count("EagerFusionCompiles");
                if (trn_program_from_cache(p)) count("EagerFusionDiskCacheHits");
            } else {
                trn_program_free(p);
                job.entry->state = Entry::Failed;
                count("EagerFusionCompileFailures");
                TORCH_WARN_ONCE("neuron eager fusion: a fused group failed to compile; its ops run "
                                "unfused: ",
                                why.empty() ? "workspace allocation failed" : why);
            }
            cache().compiling--;
        }
        cache().cv.notify_all();
    }
}

void enqueue(const std::shared_ptr<Entry> &e, trn_graph *graph) {
    std::lock_guard<std::mutex> lk(cache().mu);
    if (!cache().worker_started) {
        std::thread(worker_main).detach();
        cache().worker_started = true;
    }
    e->state = Entry::Compiling;
    cache().compiling++;
    cache().jobs.push_back({e, graph});
    cache().cv.notify_all();
}

void run_fused(const Group &g, const Entry &e, End why) {
    const bool traced = trn_trace_active();
    if (traced) {
        std::string name = "trn::fused[" + std::to_string(g.ops.size()) + " ops]";
        std::string detail = std::string("end=") + end_name(why) + " ops=";
        for (size_t i = 0; i < g.ops.size(); i++) detail.append(i ? "," : "").append(g.ops[i].name);
        uint64_t bytes = 0;
        int64_t n = 1;
        for (int i = 0; i < g.ndim; i++) n *= g.sizes[i];
        for (size_t b = 0; b < g.bufs.size(); b++)
            if (e.node[b] >= 0) bytes += static_cast<uint64_t>(n) * trn_dtype_size(g.bufs[b].dtype);
        trn_trace_push(TRN_ACTIVITY_KERNEL, name.c_str(), detail.c_str(), 0, bytes);
    }
    trn_run *r = nullptr;
    trn_status st = trn_run_create(e.prog, e.workspace, &r);
    for (size_t b = 0; st == TRN_SUCCESS && b < g.bufs.size(); b++)
        if (e.node[b] >= 0) st = trn_run_set_buffer(r, e.node[b], g.bufs[b].ptr);
    int host = -1;
    if (st == TRN_SUCCESS) st = trn_run_continue(r, g.s, &host);
    if (r != nullptr) {
        const trn_status fin = trn_run_finish(r, g.s);
        if (st == TRN_SUCCESS) st = fin;
    }
    if (traced) trn_trace_pop();
    TRN_CHECK(st);
}

void log_group(const Group &g, End why, bool fused) {
    LogRecord rec{static_cast<int>(g.ops.size()), why, fused, ""};
    for (size_t i = 0; i < g.ops.size(); i++) rec.ops.append(i ? "," : "").append(g.ops[i].name);
    g_log.push_back(std::move(rec));
    if (g_log.size() > kLogMax) g_log.pop_front();
}

// Runs the open group (group_mu() held). The group is moved out first, so the
// launches below see no open group.
void flush(End why) {
    if (open_group().empty()) return;
    Group g = std::move(open_group());
    open_group() = Group{};
    g_open.store(false);
    if (g.ops.size() == 1) {
        launch_one(g, g.ops[0]);
        return;
    }
    // An output nobody holds any more is not written (it stays in registers);
    // the group holds one reference per storage.
    std::vector<char> alive(g.bufs.size(), 0);
    // Only for outputs the group creates (an input stays an input; a buffer
    // read first and then written is always stored back), so the key does
    // not depend on whether the caller still holds its inputs.
    for (size_t b = 0; b < g.bufs.size(); b++)
        alive[b] = g.bufs[b].written && !g.bufs[b].read_first &&
                   g.storages[g.bufs[b].storage].use_count() > 1;
    const std::string key = pattern_key(g, alive);
    std::shared_ptr<Entry> e;
    bool build = false, ready = false;
    {
        std::lock_guard<std::mutex> lk(cache().mu);
        // One-off shapes (a growing KV cache) must not grow the map forever:
        // patterns never compiled are forgotten past a bound.
        if (cache().map.size() >= kMaxPatterns) {
            for (auto it = cache().map.begin(); it != cache().map.end();)
                it = it->second->state == Entry::Unbuilt ? cache().map.erase(it) : std::next(it);
        }
        auto &slot = cache().map[key];
        if (!slot) slot = std::make_shared<Entry>();
        e = slot;
        e->seen++;
        build = e->state == Entry::Unbuilt && e->seen >= kCompileAfter;
        ready = e->state == Entry::Ready;  // prog, node and workspace are final once Ready
    }
    count(std::string("EagerGroupEnd.") + end_name(why));
    if (ready) {
        run_fused(g, *e, why);
        count("EagerFusedGroups");
        count("EagerFusedOps", static_cast<int64_t>(g.ops.size()));
        count("EagerFusionCacheHits");
        log_group(g, why, true);
        return;
    }
    if (build) {
        std::vector<int> node;
        trn_graph *graph = build_graph(g, alive, node);
        e->node = std::move(node);
        enqueue(e, graph);
    }
    for (const Op &op : g.ops) launch_one(g, op);
    count("EagerUnfusedGroups");
    log_group(g, why, false);
}

End hint_or(End fallback) { return tl_hint >= 0 ? static_cast<End>(tl_hint) : fallback; }

trn_status pending_hook(trn_stream *s, int why, char *msg, size_t msg_size) {
    try {
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        if (open_group().s == s) flush(hint_or(why == TRN_PENDING_SYNC ? End::Sync : End::Op));
        return TRN_SUCCESS;
    } catch (const std::exception &ex) {
        std::snprintf(msg, msg_size, "%s", ex.what());
        return TRN_ERROR_KERNEL;
    }
}

void install_hook() {
    static std::once_flag once;
    std::call_once(once, [] { trn_stream_set_pending_hook(pending_hook); });
}

}  // namespace

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

// Adds one op over (ndim, sizes) to the open group, ending it first when the
// op cannot join (another stream or shape, an alias hazard, the caps).
// acc[0] is the output; op.in[i].buf holds, for tensor operands, the index
// into acc of the input (replaced by its buffer here).
bool record(trn_stream *s, int ndim, const int64_t *sizes, const std::vector<Access> &acc, Op op) {
    for (const Access &a : acc)
        if (!a.storage) return false;
    install_hook();
    std::lock_guard<std::recursive_mutex> lk(group_mu());
    if (!open_group().empty()) {
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
        g.s = s;
        g.ndim = ndim;
        g.sizes.fill(0);
        for (int i = 0; i < ndim; i++) g.sizes[i] = sizes[i];
        g.bufs.clear();
        g.storages.clear();
        g.held_bytes = 0;
        if (!alias_safe(g, acc)) return false;
    }
    for (int i = 0; i < op.n_in; i++)
        if (op.in[i].buf >= 0) op.in[i].buf = buf_index(g, acc[op.in[i].buf]);
    // The output last: an in-place op reads its buffer before writing it.
    if (storage_index(g, acc[0].storage, false) < 0) g.held_bytes += acc[0].storage.nbytes();
    op.out = buf_index(g, acc[0]);
    g.bufs[op.out].written = true;
    g.ops.push_back(op);
    g_open.store(true);
    trn_stream_mark_pending(s);
    return true;
}

}  // namespace

bool offer_ew(trn_stream *s, const trn_ew_desc &d, const at::TensorIteratorBase &iter,
              const char *name) {
    if (switched_off_now() || !op_fusible(d)) return false;
    const int n_in = trn_ew_op_arity(d.op);
    // Operand accesses: output 0, then the inputs in kernel slot order (the
    // iterator's args after its outputs, as elementwise.cpp's launch builds d).
    std::vector<Access> acc;
    acc.reserve(4);
    acc.push_back({d.out, d.out_dtype, d.out_strides, iter.tensor_base(0).storage(), true});
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
            continue;
        }
        const int arg = i + iter.noutputs();
        if (arg >= iter.ntensors() || iter.data_ptr(arg) != d.in[i]) return false;
        o.buf = static_cast<int>(acc.size());
        acc.push_back(
            {d.in[i], d.in_dtype[i], d.in_strides[i], iter.tensor_base(arg).storage(), false});
    }
    return record(s, d.ndim, d.sizes, acc, op);
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
    std::vector<Access> acc;
    acc.push_back({dst.data_ptr(), *dd, dbytes, dst.storage(), true});
    acc.push_back({src.const_data_ptr(), *sd, sbytes, src.storage(), false});
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

namespace {

void flush_now(End why) {
    std::lock_guard<std::recursive_mutex> lk(group_mu());
    flush(why);
}

BindingsRegistrar reg([](pybind11::module_ &m) {
    m.def(
        "_eager_fusion_set_enabled",
        [](bool on) {
            guarded([&] {
                if (!on) flush_now(End::Off);
                g_enabled.store(on ? 1 : 0);
            });
        },
        "Switches Adaptive Eager Execution on or off (an open group runs first).");
    m.def("_eager_fusion_switched_on", [] { return switched_on(); });
    m.def("_eager_fusion_active", [] { return fusion_on(); });
    m.def(
        "_eager_fusion_flush", [] { guarded([] { flush_now(End::Sync); }); },
        "Runs the open group, if any.");
    m.def(
        "_eager_fusion_wait",
        [](double timeout_s) {
            pybind11::gil_scoped_release nogil;
            std::unique_lock<std::mutex> lk(cache().mu);
            return cache().cv.wait_for(lk, std::chrono::duration<double>(timeout_s),
                                       [] { return cache().compiling == 0; });
        },
        "Waits until no fused group is compiling; False on timeout.");
    m.def("_eager_fusion_stats", [] {
        std::lock_guard<std::mutex> lk(cache().mu);
        int ready = 0, failed = 0;
        for (const auto &kv : cache().map) {
            ready += kv.second->state == Entry::Ready;
            failed += kv.second->state == Entry::Failed;
        }
        pybind11::dict d;
        d["patterns"] = cache().map.size();
        d["ready"] = ready;
        d["failed"] = failed;
        d["compiling"] = cache().compiling;
        return d;
    });
    m.def("_eager_fusion_log", [] {
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        pybind11::list out;
        for (const LogRecord &r : g_log)
            out.append(pybind11::make_tuple(r.n_ops, end_name(r.end), r.fused, r.ops));
        return out;
    });
    m.def("_eager_fusion_clear_log", [] {
        std::lock_guard<std::recursive_mutex> lk(group_mu());
        g_log.clear();
    });
    m.def(
        "_eager_fusion_clear_cache",
        [] {
            guarded([] {
                flush_now(End::Sync);
                pybind11::gil_scoped_release nogil;  // the compile thread may need it
                std::unique_lock<std::mutex> lk(cache().mu);
                cache().cv.wait(lk, [] { return cache().compiling == 0; });
                // Programs stay loaded (a run may still hold one on a stream);
                // only the map forgets them.
                cache().map.clear();
            });
        },
        "Forgets every fused pattern (tests: see compiles happen again).");
});

}  // namespace

}  // namespace neuron::eager_group
