// aten/eager_group_run.cpp - how Adaptive Eager runs a group at its end (see
// eager_group_impl.h): keyed by its pattern, it runs as the compiled program
// of that key or, until that program exists, replays its ops one by one
// exactly as they would have launched (a group of one op is just launched).
//
// Adaptive: a fused program is not always faster. On tensors that fit in
// cache the unfused eager kernels (hand-vectorized, split across the
// worker threads) can beat a generated loop, and then fusion only costs.
// So a Ready pattern first alternates fused runs and unfused replays, timed
// around their launches, and keeps whichever was faster (EagerFusionDeclined
// counts patterns left unfused). A fused sample also counts what fusing
// costs on the host (recording the ops, keying the pattern): a declined
// pattern's ops then launch at once, paying neither (StartSigs), so on tiny
// tensors fusion must beat plain launches, not a replay. Both paths give the same bits, so the
// choice changes time only. With inline launches a trial's time is the
// launches' own. With worker-thread streams (the default) a launch returns
// before its work ran: two timing events on the stream around the launches
// give the stream's side, and a trial costs the later of the two sides -
// the host's (recording, keying, launching: what a decode step waits on)
// and the stream's (the kernels: what a training step waits on). The
// events complete after the run, so the trial is scored at the pattern's
// next run (eager fusion used to run every Ready pattern fused there, and
// decode-sized groups of two or three ops cost ~2 us more host time each
// than their plain launches: generate() 5-20 % slower with fusion on).
#include <ATen/ops/empty.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "aten/eager_group_impl.h"
#include "runtime/device.h"
#include "trn/copy.h"
#include "trn/trace.h"

namespace neuron::eager_group::detail {

namespace {

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

// Replays the group's ops one by one. A buffer whose storage the group let go
// (release_dead) gets a temporary from the caching allocator at its first
// op, returned after its last one: as unfused execution would have held it.
// Its old address may belong to another tensor by now.
//
// An input only the group still holds (a saved activation autograd let go
// of) is let go after its last op too, as unfused execution frees it. The
// temporaries are allocated past the peak check of release_dead_storages:
// what a replay of a group ended there (why: End::Cap) adds to the peak is
// noted (replay_raised_peak), so the check does not count it as reached.
void replay(Group &g, End why) {
    const size_t nb = g.bufs.size();
    std::vector<int> last(nb, -1);
    bool any = false;
    for (size_t b = 0; b < nb; b++) any = any || !g.storages[g.bufs[b].storage];
    if (!any) {
        for (const Op &op : g.ops) launch_one(g, op);
        return;
    }
    for (size_t i = 0; i < g.ops.size(); i++) {
        const Op &op = g.ops[i];
        last[op.out] = static_cast<int>(i);
        for (int k = 0; k < op.n_in; k++)
            if (op.in[k].buf >= 0) last[op.in[k].buf] = static_cast<int>(i);
    }
    std::vector<int> st_last(g.storages.size(), -1);
    for (size_t b = 0; b < nb; b++)
        st_last[g.bufs[b].storage] = std::max(st_last[g.bufs[b].storage], last[b]);
    std::vector<at::Tensor> temp(nb);
    const int device = trn_stream_device(g.s);
    const c10::Device dev(c10::DeviceType::PrivateUse1, device);
    trn_mem_stats before{};
    const bool stats = why == End::Cap && trn_mem_get_stats(device, &before) == TRN_SUCCESS;
    if (why == End::Cap && !stats) trn_clear_error();
    for (size_t i = 0; i < g.ops.size(); i++) {
        const Op &op = g.ops[i];
        // Created storages are written before they are read: the output is
        // the first access of a released buffer.
        const int b = op.out;
        if (!g.storages[g.bufs[b].storage] && !temp[b].defined()) {
            int64_t span = static_cast<int64_t>(trn_dtype_size(g.bufs[b].dtype));
            for (int d = 0; d < g.ndim; d++) span += (g.sizes[d] - 1) * g.bufs[b].strides[d];
            temp[b] = at::empty({span}, at::TensorOptions().dtype(at::kByte).device(dev));
            g.bufs[b].ptr = temp[b].data_ptr();
            if (trn_stream_async_enabled()) TRN_CHECK(trn_mem_record_stream(g.bufs[b].ptr, g.s));
        }
        launch_one(g, op);
        for (size_t k = 0; k < nb; k++)
            if (last[k] == static_cast<int>(i) && temp[k].defined()) temp[k] = at::Tensor();
        for (size_t si = 0; si < g.storages.size(); si++)
            if (st_last[si] == static_cast<int>(i) && g.storages[si] &&
                g.storages[si].use_count() == 1)
                g.storages[si] = c10::Storage();
    }
    trn_mem_stats after{};
    if (!stats) return;
    if (trn_mem_get_stats(device, &after) == TRN_SUCCESS)
        replay_raised_peak(device, before.allocated_bytes_peak, after.allocated_bytes_peak);
    else
        trn_clear_error();
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

constexpr int kTrials = 3;  // timed runs of each side before the choice

void record_trial(const Group &g, Entry &e, bool fused, int64_t ns);

// Worker-thread streams: scores the pending trial of e once its events
// completed; false while they have not (the stream is still behind).
bool score_pending_trial(const Group &g, Entry &e) {
    if (!e.trial_pending) return true;
    bool done = false;
    if (trn_event_query(e.trial_end, &done) != TRN_SUCCESS) {
        trn_clear_error();  // an error of the stream's work: reported by its sync
        e.trial_pending = false;
        return true;
    }
    if (!done) return false;
    double ms = 0;
    e.trial_pending = false;
    if (trn_event_elapsed_ms(e.trial_start, e.trial_end, &ms) != TRN_SUCCESS) {
        trn_clear_error();
        return true;
    }
    const int64_t stream_ns = static_cast<int64_t>(ms * 1e6);
    record_trial(g, e, e.trial_fused, std::max(e.trial_host_ns, stream_ns));
    return true;
}

// Whether this run of the Ready pattern e is fused; timed: whether to time it.
bool choose_fused(const Group &g, Entry &e, bool &timed) {
    timed = false;
    const int mode = g_adaptive.load(std::memory_order_relaxed);
    if (mode == kAdaptiveOff) return true;
    if (trn_stream_async_enabled() && !score_pending_trial(g, e)) return true;  // untimed
    const int c = e.choice.load(std::memory_order_relaxed);
    if (c != Entry::Trial) return c == Entry::Fuse;
    timed = true;
    return e.trials % 2 == 0;
}

// Worker-thread streams: marks the stream before a timed run's launches
// (false: no events, the run goes untimed).
bool start_stream_timing(Entry &e, trn_stream *s) {
    const bool ok = (e.trial_start != nullptr ||
                     trn_event_create(TRN_EVENT_TIMING, &e.trial_start) == TRN_SUCCESS) &&
                    (e.trial_end != nullptr ||
                     trn_event_create(TRN_EVENT_TIMING, &e.trial_end) == TRN_SUCCESS) &&
                    trn_event_record(e.trial_start, s) == TRN_SUCCESS;
    if (!ok) trn_clear_error();
    return ok;
}

uint64_t op_start_sig(const Group &g, const Op &op) {
    OperandView in[3]{};
    for (int i = 0; i < op.n_in; i++) {
        const Operand &o = op.in[i];
        in[i] = o.buf < 0 ? OperandView{o.dtype, nullptr}
                          : OperandView{g.bufs[o.buf].dtype, g.bufs[o.buf].strides.data()};
    }
    const OperandView out{g.bufs[op.out].dtype, g.bufs[op.out].strides.data()};
    return start_sig(op, g.ndim, g.sizes.data(), in, out);
}

// After the last trial: the choice, and where the group's ops may start a
// group from now on (StartSigs).
void record_trial(const Group &g, Entry &e, bool fused, int64_t ns) {
    int64_t &best = fused ? e.best_fused_ns : e.best_unfused_ns;
    if (ns < best) best = ns;
    if (++e.trials < 2 * kTrials) return;
    const bool fuse = e.best_fused_ns <= e.best_unfused_ns &&
                      g_adaptive.load(std::memory_order_relaxed) != kAdaptiveDecline;
    e.choice.store(fuse ? Entry::Fuse : Entry::Unfuse);
    if (fuse) {
        const uint64_t sig = op_start_sig(g, g.ops[0]);
        start_sigs().wanted.insert(sig);
        lone_forget(sig);
    } else {
        count("EagerFusionDeclined");
        for (const Op &op : g.ops) start_sigs().declined.insert(op_start_sig(g, op));
    }
}

}  // namespace

Entry::~Entry() {
    // Reference-counted: safe while a record is still queued.
    if (trial_start != nullptr) trn_event_destroy(trial_start);
    if (trial_end != nullptr) trn_event_destroy(trial_end);
}

std::atomic<int> g_adaptive{kAdaptiveOn};

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int64_t adaptive_clock() {
    return g_adaptive.load(std::memory_order_relaxed) == kAdaptiveOff ? 0 : now_ns();
}

// Runs the open group (group_mu() held). The group is moved out first, so the
// launches below see no open group.
void flush(End why) {
    if (open_group().empty()) return;
    Group g = std::move(open_group());
    open_group() = Group{};
    g_open.store(false);
    const bool adaptive = g_adaptive.load(std::memory_order_relaxed) != kAdaptiveOff;
    // One-off shapes (a growing KV cache) add signatures without end: past a
    // bound they are forgotten and learnt again.
    if (start_sigs().single.size() > kMaxStartSigs) {
        start_sigs().single.clear();
        lone_forget_all();
    }
    if (start_sigs().multi.size() > kMaxStartSigs) start_sigs().multi.clear();
    if (g.ops.size() == 1) {
        if (adaptive) {
            const uint64_t sig = op_start_sig(g, g.ops[0]);
            if (start_sigs().multi.count(sig) == 0) start_sigs().single[sig]++;
        }
        replay(g, why);  // its output may have been let go (release_dead)
        return;
    }
    if (adaptive) {
        const uint64_t sig = op_start_sig(g, g.ops[0]);
        start_sigs().multi.insert(sig);
        lone_forget(sig);
    }
    // An output nobody holds any more is not written (it stays in registers);
    // the group holds one reference per storage.
    std::vector<char> alive(g.bufs.size(), 0);
    // Only for outputs the group creates (an input stays an input; a buffer
    // read first and then written is always stored back), so the key does
    // not depend on whether the caller still holds its inputs.
    const int64_t t_key = g.record_ns > 0 ? now_ns() : 0;
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
    count_end(why);
    if (ready) {
        // What fusing costs beyond the fused run: recording the ops and
        // finding their pattern (unfused execution pays neither).
        const int64_t overhead = t_key > 0 ? g.record_ns + (now_ns() - t_key) : 0;
        bool timed = false;
        const bool fused = choose_fused(g, *e, timed);
        const bool on_stream = timed && trn_stream_async_enabled();
        if (on_stream) timed = start_stream_timing(*e, g.s);
        const int64_t t0 = timed ? now_ns() : 0;
        if (fused) {
            run_fused(g, *e, why);
        } else {
            replay(g, why);
        }
        if (timed) {
            const int64_t host_ns = now_ns() - t0 + (fused ? overhead : 0);
            if (!on_stream) {
                record_trial(g, *e, fused, host_ns);
            } else if (trn_event_record(e->trial_end, g.s) == TRN_SUCCESS) {
                e->trial_pending = true;
                e->trial_fused = fused;
                e->trial_host_ns = host_ns;
            } else {
                trn_clear_error();
            }
        }
        if (fused) {
            count("EagerFusedGroups");
            count("EagerFusedOps", static_cast<int64_t>(g.ops.size()));
            count("EagerFusionCacheHits");
        } else {
            count(timed ? "EagerUnfusedGroups" : "EagerDeclinedGroups");
        }
        log_group(g, why, fused);
        return;
    }
    if (build) {
        std::vector<int> node;
        trn_graph *graph = build_graph(g, alive, node);
        e->node = std::move(node);
        enqueue(e, graph);
    }
    replay(g, why);
    count("EagerUnfusedGroups");
    log_group(g, why, false);
}

}  // namespace neuron::eager_group::detail
