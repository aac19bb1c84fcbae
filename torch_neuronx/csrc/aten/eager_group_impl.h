// aten/eager_group_impl.h - what the Adaptive Eager files share (not for
// adapters: they include eager_group.h). One file per purpose:
//   eager_group_record.cpp  switches, eligibility, the open group, offer_*()
//   eager_group_pattern.cpp pattern keys, graphs, the pattern cache and its
//                           background compile thread
//   eager_group_run.cpp     flush: fused run or unfused replay, and the
//                           per-pattern choice between them (adaptive)
//   eager_group_metrics.cpp counters, the recent-group log, the _C bindings
#pragma once

#include <ATen/TensorIterator.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "aten/eager_group.h"
#include "trn/compiler.h"
#include "trn/stream.h"

namespace neuron::eager_group::detail {

constexpr size_t kMaxOps = 64;    // group size cap (End::Cap)
constexpr int kCompileAfter = 2;  // a pattern compiles when seen this often
constexpr size_t kMaxPatterns = 4096;
constexpr size_t kMaxStartSigs = 65536;  // StartSigs.single / .multi bound
// The group keeps its outputs' memory until it runs (intermediates that
// unfused execution would free at once): bounded, as a size cap (End::Cap).
constexpr size_t kMaxHeldBytes = size_t{1} << 30;
// Inputs of the group that nobody else holds any more (release_dead_storages)
// may keep this much; more only while allocations stay within the device's
// peak already reached (else the group runs: End::Cap).
constexpr size_t kMinDeadInputBytes = size_t{1} << 20;
// libtrn's allocation granule (runtime/memory.c's MIN_BLOCK): a request
// occupies its size rounded up to it in trn_mem_stats.allocated_bytes.
constexpr size_t kAllocGranule = 512;

// ---- switches (eager_group_record.cpp) ----------------------------------------------------

extern std::atomic<int> g_enabled;  // -1: read the environment on first use
extern thread_local int tl_hint;    // EndHint's reason, -1: none
bool switched_on();
bool fusion_on();

// ---- the recorded group (eager_group_record.cpp) -----------------------------------------

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
    // Per storage (parallel to storages), so a recorded op looks up its
    // operands without scanning every buffer: its impl, whether the group
    // writes it, its buffers (almost always one).
    std::vector<const c10::StorageImpl *> impls;
    std::vector<char> st_written;
    // Storages an output of the group created (not read before the group
    // wrote them). When the caller drops every tensor of one, the group lets
    // it go at once (release_dead): its storage and impl become null and its
    // buffer lives on only in registers (fused) or in a temporary that an
    // unfused replay allocates for as long as it is used, so the group holds
    // no more memory than unfused execution would.
    std::vector<char> st_created;
    std::vector<c10::SmallVector<int, 1>> st_bufs;
    std::vector<Op> ops;
    size_t held_bytes = 0;  // of the storages the group's outputs created
    int64_t record_ns = 0;  // time its offer_*() calls took (adaptive timing only)
    bool empty() const { return ops.empty(); }
};

// The group and its lock, never destroyed (a group open at exit is dropped).
std::recursive_mutex &group_mu();
Group &open_group();
extern std::atomic<bool> g_open;  // open_group() has ops (read without group_mu())

// An op's signature as the first op of a group (op, dtypes, parameters,
// scalars, shape, operand dtypes and strides; no addresses). operand(i)
// gives input i's (dtype, byte strides), or nullptr strides for a scalar.
struct OperandView {
    trn_dtype dtype;
    const int64_t *strides;  // nullptr: a scalar
};
uint64_t start_sig(const Op &op, int ndim, const int64_t *sizes, const OperandView *in,
                   const OperandView &out);

// Ops that start no group (under group_mu()), launched at once as with
// fusion off, while patterns are adaptive:
// - an op that starts a declined pattern: a replay writes every
//   intermediate to its own buffer, held until the flush, where unfused
//   execution reuses one hot buffer;
// - an op whose group ended at that op alone twice (a lone elementwise op
//   between matmuls, say): recording it only delayed its launch.
// An op that also starts a fused pattern (wanted) or a group of two or more
// ops (multi) is still recorded.
struct StartSigs {
    std::unordered_set<uint64_t> declined, wanted, multi;
    std::unordered_map<uint64_t, int> single;
};
StartSigs &start_sigs();

// The signatures StartSigs says start no group, in a direct-mapped table read
// without group_mu(): a lone decode op then skips the lock and the three set
// lookups. Learnt and forgotten under group_mu(); whoever makes StartSigs
// stop saying "no group" for a signature (wanted, multi, single cleared)
// forgets it here. A stale read only picks fused or unfused for one op, and
// both give the same bits.
bool lone_known(uint64_t sig);
void lone_learn(uint64_t sig);
void lone_forget(uint64_t sig);
void lone_forget_all();

// Lets go of the created storages only the group still references (group_mu() held).
void release_dead(Group &g);

// The device's peak of memory in use (trn_mem_stats.allocated_bytes_peak) less
// what replays of groups that release_dead_storages ran at the peak (End::Cap)
// added to it (replay_raised_peak): what release_dead_storages compares with
// (group_mu() held). Such a replay allocates its temporaries after the ops'
// own outputs, so it goes past the peak that unfused execution reaches;
// comparing with that raised peak let each warm-up step's new patterns hold
// more (GPT-2: 106 -> 112 MiB over three steps). Other replays are not
// counted: the first step's, while the peak still grows, made the reference
// too low (GPT-2: 88.6 against 104 MiB, one layer fused fewer).
size_t reference_peak(int device, size_t peak);
void replay_raised_peak(int device, size_t peak_before, size_t peak_after);

bool is16(trn_dtype d);
bool is_float(trn_dtype d);
bool element_strides(int ndim, const int64_t *bytes, trn_dtype d, int64_t *out);
void install_hook();

// ---- pattern cache (eager_group_pattern.cpp) ---------------------------------------------

struct Entry {
    int seen = 0;
    enum State { Unbuilt, Compiling, Ready, Failed } state = Unbuilt;
    trn_program *prog = nullptr;
    std::vector<int> node;  // per buffer: the node whose buffer it is, -1: none
    void *workspace = nullptr;
    // Adaptive choice (eager_group_run.cpp, written under group_mu()): once
    // Ready, fused runs and unfused replays alternate until each was timed
    // kTrials times; the faster (by its fastest sample) is kept for good.
    enum Choice { Trial, Fuse, Unfuse };
    std::atomic<int> choice{Trial};
    int trials = 0;
    int64_t best_fused_ns = INT64_MAX, best_unfused_ns = INT64_MAX;
    // Worker-thread streams: a timed run's launches return before they ran,
    // so two timing events around them measure the stream's side, and the
    // trial is scored at a later run of the pattern once both completed.
    trn_event *trial_start = nullptr, *trial_end = nullptr;
    bool trial_pending = false, trial_fused = false;
    int64_t trial_host_ns = 0;  // the timed run's host time (fused: with recording)
    Entry() = default;
    Entry(const Entry &) = delete;
    Entry &operator=(const Entry &) = delete;
    ~Entry();
};

struct Settings {
    std::string include_dir;
    std::string cache_dir;  // empty: no disk cache
    int opt_level = 3;      // trn_compile_options.opt_level (-O2)
    std::string cc_flags;
    double lock_timeout_s = 0;
    int64_t cache_max_bytes = 0;
    bool configured = false;
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
    // Held while the compile thread asks Python for `settings`; python_gone
    // from atexit on (python_exiting).
    std::mutex python_mu;
    bool python_gone = false;
};
Cache &cache();

// The pattern: everything the fused program depends on, no addresses.
std::string pattern_key(const Group &g, const std::vector<char> &alive);
// The group as a graph (what torch.compile's lower_pointwise.py builds for
// the same ops); node[b]: the node whose buffer buffer b is at run time.
trn_graph *build_graph(const Group &g, const std::vector<char> &alive, std::vector<int> &node);
// Hands the graph to the compile thread (started on first use); e becomes Compiling.
void enqueue(const std::shared_ptr<Entry> &e, trn_graph *graph);
// Called by Python's atexit (GIL held): the compile thread asks Python for
// its settings only before this, never while the interpreter finalizes.
void python_exiting();

// ---- run (eager_group_run.cpp) -----------------------------------------------------------

// Runs the open group (group_mu() held).
void flush(End why);

// Whether a Ready pattern runs as its timed choice (kAdaptiveOn, the
// default: timed fused against unfused first) or always fused
// (kAdaptiveOff). kAdaptiveDecline: as kAdaptiveOn, but every trial ends in
// a decline (tests of the declined path). Choices made stay with the
// patterns across mode switches.
enum { kAdaptiveOff = 0, kAdaptiveOn = 1, kAdaptiveDecline = 2 };
extern std::atomic<int> g_adaptive;
int64_t now_ns();
// now_ns() while patterns are being timed (adaptive), else 0 (no clock read).
int64_t adaptive_clock();

// ---- metrics (eager_group_metrics.cpp) ---------------------------------------------------

void count(const char *name, int64_t n = 1);
void count_end(End why);
// The last groups for eager_fusion.recent_groups() (group_mu() held).
void log_group(const Group &g, End why, bool fused);

}  // namespace neuron::eager_group::detail
