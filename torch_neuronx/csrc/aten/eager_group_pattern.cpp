// aten/eager_group_pattern.cpp - Adaptive Eager's pattern cache (see
// eager_group_impl.h): a group's key (no addresses), its graph (the same
// trn_graph_* calls torch.compile's lowering makes), and the background
// thread that compiles it through the compile cache's disk directory, so no
// op ever waits for the C compiler.
#include <pthread.h>

#include <cstdlib>
#include <thread>

#include <pybind11/pybind11.h>

#include "aten/eager_group_impl.h"
#include "runtime/device.h"

namespace neuron::eager_group::detail {

namespace {

Cache *g_cache_ptr = nullptr;
std::once_flag g_cache_once;

// A forked child has no compile thread (and may have forked while it held
// the lock): it starts from an empty cache, the parent's left as it was.
void cache_after_fork_child() { g_cache_ptr = new Cache; }

}  // namespace

Cache &cache() {
    std::call_once(g_cache_once, [] {
        g_cache_ptr = new Cache;
        pthread_atfork(nullptr, nullptr, cache_after_fork_child);
    });
    return *g_cache_ptr;
}

namespace {

template <typename T> void put_raw(std::string &k, const T &v) {
    k.append(reinterpret_cast<const char *>(&v), sizeof v);
}

}  // namespace

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

namespace {

// The compile settings torch.compile uses (headers, disk cache, -O level,
// flags), asked of torch_neuronx/eager_fusion.py once, from this thread,
// when the first group compiles: nothing is resolved (no cache directory is
// created) in a process that never compiles one. Not once the interpreter
// is exiting: a thread that takes the GIL while it finalizes is ended inside
// pybind11's frames, whose unwinding then aborts the process
// ("PyThreadState_Get: the GIL is released"; seen when a program raised
// while its first groups compiled). python_exiting() waits for an ask in
// progress and closes the door.
Settings resolve_settings() {
    Settings s;
    std::unique_lock<std::mutex> py(cache().python_mu);
    if (!cache().python_gone && Py_IsInitialized() && !_Py_IsFinalizing()) {
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
    py.unlock();
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
        if (!s.configured) {
            // No settings (warned), or the interpreter is exiting: the
            // group's ops keep running unfused.
            trn_graph_free(job.graph);
            {
                std::lock_guard<std::mutex> lk(cache().mu);
                job.entry->state = Entry::Failed;
                cache().compiling--;
            }
            cache().cv.notify_all();
            continue;
        }
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

}  // namespace

void python_exiting() {
    // The compile thread may hold python_mu and wait for the GIL.
    pybind11::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(cache().python_mu);
    cache().python_gone = true;
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

}  // namespace neuron::eager_group::detail
