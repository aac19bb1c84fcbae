// distributed/process_group.cpp - the backend's threads, Work completion and the
// collectives. Each op checks its tensors on the caller's thread (clear
// errors before any rank waits), synchronizes the producer stream, then
// queues a body that either calls libtrn's engine or Gloo on CPU aliases.
#include "distributed/process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "aten/eager_group.h"
#include "runtime/device.h"

namespace neuron {

namespace {

// Engine errors: a caller mistake seen on every rank (mismatched shapes or
// collectives) is a ValueError; timeouts, dead peers and aborts are
// DistBackendError, as NCCL's watchdog reports them.
[[noreturn]] void throw_comm(trn_status st) {
    std::string msg = trn_last_error();
    if (st == TRN_ERROR_INVALID_ARGUMENT) C10_THROW_ERROR(ValueError, msg);
    C10_THROW_ERROR(DistBackendError, msg);
}

#define COMM_CHECK(expr)                                                                           \
    do {                                                                                           \
        trn_status comm_st_ = (expr);                                                              \
        if (comm_st_ != TRN_SUCCESS) throw_comm(comm_st_);                                         \
    } while (0)

void check_neuron(const at::Tensor &t, const char *what) {
    TORCH_CHECK(t.defined(), "neuron ", what, ": undefined tensor");
    TORCH_CHECK(t.device().type() == kNeuron, "neuron ", what, ": got a ", t.device(),
                " tensor; the neuron process group takes neuron "
                "tensors (use init_process_group('cpu:gloo,neuron:neuron') "
                "for CPU ones)");
    TORCH_CHECK(t.layout() == at::kStrided, "neuron ", what, ": sparse tensors are not supported");
    check_storable(t.scalar_type());
}

// Inputs may be strided: a contiguous copy is made on the current stream
// (the stream sync that follows covers it).
at::Tensor as_input(const at::Tensor &t, const char *what) {
    check_neuron(t, what);
    return t.is_contiguous() ? t : t.contiguous();
}

void check_output(const at::Tensor &t, const char *what) {
    check_neuron(t, what);
    TORCH_CHECK(t.is_contiguous(), "neuron ", what,
                ": output (and in-place) tensors must be contiguous, got "
                "strides ",
                t.strides(), " for sizes ", t.sizes());
}

at::Tensor single(const std::vector<at::Tensor> &v, const char *what) {
    TORCH_CHECK(v.size() == 1, "neuron ", what,
                " takes one tensor per call (one device per process), got ", v.size());
    return v[0];
}

void *ptr(const at::Tensor &t) { return t.numel() ? t.data_ptr() : nullptr; }
size_t nbytes(const at::Tensor &t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A CPU tensor over the same memory (device memory is host memory).
at::Tensor cpu_alias(const at::Tensor &t) {
    auto opts = t.options().device(at::kCPU);
    if (t.numel() == 0) return at::empty(t.sizes(), opts);
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), opts);
}
// Data movement through Gloo goes as bytes: Gloo lacks some dtypes (int16,
// the unsigned ones) that only need copying.
at::Tensor byte_alias(const at::Tensor &t) {
    auto opts = at::TensorOptions().dtype(at::kByte);
    if (t.numel() == 0) return at::empty({0}, opts);
    return at::from_blob(t.data_ptr(), {(int64_t)nbytes(t)}, opts);
}
std::vector<at::Tensor> cpu_aliases(const std::vector<at::Tensor> &v) {
    std::vector<at::Tensor> out;
    for (const auto &t : v) out.push_back(byte_alias(t));
    return out;
}

// Gloo reduces only these; the shared-memory engine reduces every dtype.
void check_gloo_reducible(const at::Tensor &t) {
    switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
    case at::kBool:
    case at::kComplexFloat:
    case at::kComplexDouble: return;
    default:
        TORCH_CHECK_TYPE(false,
                         "neuron: the Gloo transport (several hosts, or "
                         "TORCH_NEURONX_DIST_TRANSPORT=gloo) cannot reduce ",
                         t.scalar_type(), " tensors; use int32/int64");
    }
}

void sync_stream(const at::Tensor &t) {
    eager_group::EndHint hint(eager_group::End::Collective);
    TRN_CHECK(trn_stream_synchronize(current_trn_stream(t.device().index())));
}

struct RedOp {
    trn_redop op = TRN_REDOP_SUM;
    trn_reduce_post post{};
    c10d::ReduceOp::RedOpType plain = c10d::ReduceOp::SUM;  // for Gloo
};

trn_dtype reduce_dtype(const at::Tensor &t, const char *what) {
    auto d = native_dtype(t.scalar_type());
    TORCH_CHECK_TYPE(d.has_value(), "neuron ", what, " cannot reduce ", t.scalar_type(),
                     " tensors");
    return *d;
}

RedOp to_redop(const c10d::ReduceOp &r, trn_dtype dt) {
    RedOp o;
    switch (r.op_) {
    case c10d::ReduceOp::SUM: break;
    case c10d::ReduceOp::AVG: o.post.divide_by_size = true; break;
    case c10d::ReduceOp::PREMUL_SUM: {
        auto *s = dynamic_cast<c10d::PreMulSumSupplement *>(r.supplement_.get());
        TORCH_CHECK(s != nullptr, "PREMUL_SUM without a factor");
        o.post.scale = true;
        o.post.factor = s->tensor_factor.defined() ? s->tensor_factor.to(at::kCPU).item<double>()
                                                   : s->double_factor;
        break;
    }
    case c10d::ReduceOp::PRODUCT:
        o.op = TRN_REDOP_PROD;
        o.plain = r.op_;
        break;
    case c10d::ReduceOp::MIN:
        o.op = TRN_REDOP_MIN;
        o.plain = r.op_;
        break;
    case c10d::ReduceOp::MAX:
        o.op = TRN_REDOP_MAX;
        o.plain = r.op_;
        break;
    case c10d::ReduceOp::BAND:
        o.op = TRN_REDOP_BAND;
        o.plain = r.op_;
        break;
    case c10d::ReduceOp::BOR:
        o.op = TRN_REDOP_BOR;
        o.plain = r.op_;
        break;
    case c10d::ReduceOp::BXOR:
        o.op = TRN_REDOP_BXOR;
        o.plain = r.op_;
        break;
    default: TORCH_CHECK_VALUE(false, "neuron: unsupported ReduceOp ", (int)r.op_);
    }
    if (trn_comm_check_reduce(dt, o.op, &o.post) != TRN_SUCCESS)
        C10_THROW_ERROR(ValueError, std::string("neuron: ") + trn_last_error());
    return o;
}

// Gloo reduces with the plain op; AVG and PREMUL_SUM finish here.
void finish_post(const at::Tensor &t, trn_dtype dt, const RedOp &r, int size) {
    if (r.post.divide_by_size || r.post.scale)
        COMM_CHECK(trn_reduce_post_apply(ptr(t), t.numel(), dt, &r.post, size));
}

// Concatenates tensors' bytes into one host buffer (list-style inputs).
std::vector<unsigned char> concat_bytes(const std::vector<at::Tensor> &v) {
    size_t total = 0;
    for (const auto &t : v) total += nbytes(t);
    std::vector<unsigned char> buf(total);
    size_t at = 0;
    for (const auto &t : v) {
        if (nbytes(t)) std::memcpy(buf.data() + at, t.data_ptr(), nbytes(t));
        at += nbytes(t);
    }
    return buf;
}

std::vector<at::Tensor> inputs_of(const std::vector<at::Tensor> &v, const char *what) {
    std::vector<at::Tensor> out;
    for (const auto &t : v) out.push_back(as_input(t, what));
    return out;
}

void check_outputs(const std::vector<at::Tensor> &v, const char *what) {
    for (const auto &t : v) check_output(t, what);
}

void check_same(const at::Tensor &a, const at::Tensor &b, const char *what) {
    TORCH_CHECK_VALUE(a.scalar_type() == b.scalar_type() && a.numel() == b.numel(), "neuron ", what,
                      ": tensor of ", a.scalar_type(), " ", a.sizes(), " does not match ",
                      b.scalar_type(), " ", b.sizes());
}

// What the ranks of the next engine call agree on besides what the engine
// compares itself (trn_comm_agree): `t`'s dtype (null: none), the root of a
// gather / scatter (-1: none), which tensor of a coalesced call it is.
void agree_next(trn_comm *comm, const at::Tensor *t, int root = -1, size_t part = 0,
                size_t parts = 1) {
    trn_comm_agree a{};
    a.root = root;
    if (t) {
        auto d = native_dtype(t->scalar_type());
        std::snprintf(a.dtype, sizeof a.dtype, "%s",
                      d ? trn_dtype_name(*d) : c10::toString(t->scalar_type()));
    }
    a.part = static_cast<uint32_t>(part);
    a.parts = static_cast<uint32_t>(parts);
    trn_comm_agree_next(comm, &a);
}

// Over Gloo the same agreement travels as one all_gather of a fixed record
// per rank ahead of each collective, because Gloo compares nothing itself
// (different roots, or dtypes of equal size, "succeed" with wrong values)
// and a rank that fails a local check must fail the call on every rank, as
// the engine's stand-ins do (ProcessGroupNeuron::refuse_everywhere). The
// messages are the engine's (libtrn/src/collectives/comm.c).
struct GlooAgreement {
    int32_t failed = 0;
    int32_t root = -1;
    uint32_t part = 0, parts = 1;
    char what[32] = {};
    char dtype[16] = {};
    char error[448] = {};
};
static_assert(sizeof(GlooAgreement) == 512, "one fixed record per rank");

GlooAgreement agreement(const char *what, const at::Tensor *t, int root = -1, size_t part = 0,
                        size_t parts = 1) {
    GlooAgreement a;
    std::snprintf(a.what, sizeof a.what, "%s", what);
    if (t) {
        auto d = native_dtype(t->scalar_type());
        std::snprintf(a.dtype, sizeof a.dtype, "%s",
                      d ? trn_dtype_name(*d) : c10::toString(t->scalar_type()));
    }
    a.root = root;
    a.part = static_cast<uint32_t>(part);
    a.parts = static_cast<uint32_t>(parts);
    return a;
}

void gloo_agree(c10d::Backend &gloo, int rank, int size, const GlooAgreement &mine) {
    const int64_t rec = sizeof(GlooAgreement);
    std::vector<at::Tensor> in{at::empty({rec}, at::kByte)};
    std::memcpy(in[0].data_ptr(), &mine, sizeof mine);
    std::vector<std::vector<at::Tensor>> all(1);
    for (int r = 0; r < size; r++) all[0].push_back(at::empty({rec}, at::kByte));
    gloo.allgather(all, in)->wait();
    std::vector<GlooAgreement> got(size);
    for (int r = 0; r < size; r++) {
        std::memcpy(&got[r], all[0][r].data_ptr(), sizeof(GlooAgreement));
        got[r].what[sizeof got[r].what - 1] = 0;
        got[r].dtype[sizeof got[r].dtype - 1] = 0;
        got[r].error[sizeof got[r].error - 1] = 0;
    }
    for (int r = 0; r < size; r++)
        if (got[r].failed)
            C10_THROW_ERROR(ValueError,
                            c10::str("neuron ", got[r].what, " failed on every rank: rank ", r,
                                     " could not make the call: ", got[r].error));
    for (int r = 0; r < size; r++) {
        const GlooAgreement &o = got[r];
        if (std::strcmp(o.what, mine.what) != 0)
            C10_THROW_ERROR(ValueError,
                            c10::str("neuron collective mismatch: rank ", rank, " called ",
                                     mine.what, " while rank ", r, " called ", o.what));
        if (o.root != mine.root)
            C10_THROW_ERROR(ValueError,
                            c10::str("neuron ", mine.what, ": ranks passed different roots: rank ",
                                     rank, " passed root ", mine.root, ", rank ", r,
                                     " passed root ", o.root));
        if (mine.dtype[0] && o.dtype[0] && std::strcmp(mine.dtype, o.dtype) != 0)
            C10_THROW_ERROR(ValueError,
                            c10::str("neuron ", mine.what, ": dtypes differ across ranks: rank ",
                                     rank, " passed ", mine.dtype, ", rank ", r, " passed ",
                                     o.dtype));
        if (o.parts != mine.parts || o.part != mine.part)
            C10_THROW_ERROR(ValueError, c10::str("neuron ", mine.what,
                                                 ": coalesced calls differ across "
                                                 "ranks: rank ",
                                                 rank, " passed ", mine.parts,
                                                 " tensor(s) (this is #", mine.part, "), rank ", r,
                                                 " passed ", o.parts, " (#", o.part, ")"));
    }
}

}  // namespace

// ---- Work ------------------------------------------------------------------

NeuronWork::NeuronWork(int rank, c10d::OpType type, const char *title, std::vector<at::Tensor> keep,
                       std::vector<at::Tensor> outputs, c10::Device device)
    : c10d::Work(rank, type, title), keep_(std::move(keep)), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(),
                                                       std::vector<c10::Device>{device})) {}

void NeuronWork::complete(std::exception_ptr error) {
    if (error)
        future_->setError(error);
    else
        future_->markCompleted(c10::IValue(outputs_));
    keep_.clear();
    finish(error);
}

// ---- lifetime --------------------------------------------------------------

ProcessGroupNeuron::ProcessGroupNeuron(int rank, int size, int64_t timeout_ms, int region_fd,
                                       c10::intrusive_ptr<c10d::Backend> gloo)
    : c10d::Backend(rank, size), gloo_(std::move(gloo)), timeout_ms_(timeout_ms) {
    if (!gloo_) {
        TORCH_CHECK(region_fd >= 0, "neuron process group: no shared region and no Gloo group");
        TRN_CHECK(trn_comm_attach(region_fd, rank, size, timeout_ms, &comm_));
        p2p_worker_ = std::thread([this] { p2p_loop(); });
    }
    worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupNeuron::~ProcessGroupNeuron() { shutdown(); }

void ProcessGroupNeuron::setTimeout(std::chrono::milliseconds timeout) {
    timeout_ms_ = timeout.count();
    if (gloo_) gloo_->setTimeout(timeout);
}

void ProcessGroupNeuron::check_open() const {
    TORCH_CHECK(!stop_, "the neuron process group was shut down");
}

void ProcessGroupNeuron::shutdown() {
    bool in_flight;
    {
        std::lock_guard<std::mutex> lk(mutex_);
        if (stop_ && !worker_.joinable() && !p2p_worker_.joinable()) return;
        stop_ = true;
        in_flight = busy_ || !queue_.empty() || !p2p_pending_.empty();
    }
    // Peers may never arrive: make every pending op fail now instead.
    if (in_flight && comm_)
        trn_comm_abort(comm_, "its process group was shut down with operations "
                              "in flight");
    cv_.notify_all();
    p2p_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (p2p_worker_.joinable()) p2p_worker_.join();
    trn_comm_destroy(comm_);
    comm_ = nullptr;
}

void ProcessGroupNeuron::abort() {
    if (comm_) trn_comm_abort(comm_, "abort() was called");
    shutdown();
}

// ---- splitting -------------------------------------------------------------

ProcessGroupNeuron::SplitFactory ProcessGroupNeuron::split_factory;

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupNeuron::getBackendOptions() {
    return c10::make_intrusive<Options>("neuron", std::chrono::milliseconds(timeout_ms_.load()));
}

// `ranks` are sorted ranks of this group; ranks outside it get no backend
// (c10d's convention). Every member calls this with the same store, which
// c10d prefixes with the new group's unique name, so splits never share keys.
c10::intrusive_ptr<c10d::Backend>
ProcessGroupNeuron::split(const c10::intrusive_ptr<c10d::Store> &store,
                          const std::vector<int> &ranks, const c10::intrusive_ptr<Options> &opts) {
    check_open();
    for (size_t i = 0; i < ranks.size(); i++)
        TORCH_CHECK_VALUE(ranks[i] >= 0 && ranks[i] < size_ && (i == 0 || ranks[i] > ranks[i - 1]),
                          "neuron split: ranks must be distinct ranks of the "
                          "parent group (0..",
                          size_ - 1, "), got ", ranks);
    auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end()) return nullptr;
    TORCH_CHECK(split_factory, "neuron split: torch_neuronx.distributed is "
                               "not initialized");
    auto timeout = opts ? opts->timeout : std::chrono::milliseconds(timeout_ms_.load());
    auto backend = split_factory(store, static_cast<int>(it - ranks.begin()),
                                 static_cast<int>(ranks.size()), timeout);
    if (opts) {
        backend->setGroupUid(opts->group_name);
        backend->setGroupDesc(opts->group_desc);
    }
    return backend;
}

// ---- threads ---------------------------------------------------------------

// An argument error that one rank finds before queueing a collective, while
// the others pass their checks and wait in it, used to shift this rank's
// collectives by one: its next call paired with the one the others waited
// in (a wrong result when the two look alike). So the failing rank queues a
// stand-in that takes this call's place in the engine and fails it on every
// rank, naming this rank and its reason (trn_comm_fail_call); where every
// rank fails the check, the stand-ins meet each other. Runs in each
// collective's handler; only the outermost call queues one (allreduce
// delegates to allreduce_coalesced, ...). Over Gloo the stand-in takes part
// in the all_gather every Gloo collective starts with (gloo_agree) and fails
// it on every rank the same way.
void ProcessGroupNeuron::refuse_everywhere(c10d::OpType type, const char *what, const char *title) {
    static thread_local std::exception_ptr refused;
    std::exception_ptr e = std::current_exception();
    if ((!comm_ && !gloo_) || !e || e == refused) return;
    refused = e;
    std::string why;
    try {
        std::rethrow_exception(e);
    } catch (const c10::Error &err) {
        why = err.what_without_backtrace();
    } catch (const std::exception &err) {
        why = err.what();
    } catch (...) {
        why = "an unknown error";
    }
    std::string name = what;
    Body body = [this, name, why] {
        if (gloo_) {
            GlooAgreement a = agreement(name.c_str(), nullptr);
            a.failed = 1;
            std::snprintf(a.error, sizeof a.error, "%s", why.c_str());
            gloo_agree(*gloo_, rank_, size_, a);
        } else {
            COMM_CHECK(trn_comm_fail_call(comm_, name.c_str(), why.c_str()));
        }
    };
    try {
        enqueue(type, title, {}, {}, c10::Device(kNeuron, current_device()), body,
                c10d::kUnsetTimeout);
    } catch (...) {
        // Shut down: there is no sequence left to keep in step.
    }
}

c10::intrusive_ptr<NeuronWork> ProcessGroupNeuron::enqueue(c10d::OpType type, const char *title,
                                                           std::vector<at::Tensor> keep,
                                                           std::vector<at::Tensor> outputs,
                                                           c10::Device device, Body body,
                                                           std::chrono::milliseconds timeout) {
    seq_++;
    auto work = c10::make_intrusive<NeuronWork>(rank_, type, title, std::move(keep),
                                                std::move(outputs), device);
    CollectiveRecord obs = collective_describe(title, device.index(), rank_, size_,
                                               gloo_ ? "gloo" : "shm", work->keep_, work->outputs_);
    {
        std::lock_guard<std::mutex> lk(mutex_);
        check_open();
        queue_.push_back(Task{work, std::move(body),
                              timeout == c10d::kUnsetTimeout ? -1 : timeout.count(),
                              std::move(obs)});
    }
    cv_.notify_one();
    return work;
}

void ProcessGroupNeuron::worker_loop() {
    for (;;) {
        Task task;
        {
            std::unique_lock<std::mutex> lk(mutex_);
            cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;
            task = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
        }
        if (comm_)
            trn_comm_set_timeout(comm_,
                                 task.timeout_ms >= 0 ? task.timeout_ms : timeout_ms_.load());
        std::exception_ptr error;
        collective_started(task.obs);
        try {
            task.body();
        } catch (...) {
            error = std::current_exception();
        }
        collective_finished(task.obs, !error);
        {
            std::lock_guard<std::mutex> lk(mutex_);
            busy_ = false;
        }
        task.work->complete(error);
    }
}

void ProcessGroupNeuron::p2p_loop() {
    uint64_t idle_since = 0;
    for (;;) {
        std::vector<c10::intrusive_ptr<NeuronWork>> pending;
        {
            std::unique_lock<std::mutex> lk(mutex_);
            p2p_cv_.wait(lk, [&] { return stop_ || !p2p_pending_.empty(); });
            if (p2p_pending_.empty()) return;
            pending.assign(p2p_pending_.begin(), p2p_pending_.end());
        }
        // Requests to / from one peer complete in call order: only the
        // oldest send and the oldest receive per peer move.
        std::vector<char> send_seen(size_), recv_seen(size_);
        bool any_seen = false, progressed = false;
        for (auto &w : pending) {
            trn_p2p_req &r = w->req_;
            if (r.is_send) {
                if (send_seen[r.peer]) continue;
                send_seen[r.peer] = 1;
            } else if (r.peer >= 0) {
                if (recv_seen[r.peer]) continue;
                recv_seen[r.peer] = 1;
            } else {
                if (any_seen) continue;
                any_seen = true;
            }
            size_t done = r.done;
            int stage = r.stage;
            bool finished = false;
            trn_comm_set_timeout(comm_, timeout_ms_.load());
            trn_status st = trn_comm_p2p_progress(comm_, &r, &finished);
            std::exception_ptr error;
            if (st != TRN_SUCCESS) {
                try {
                    throw_comm(st);
                } catch (...) {
                    error = std::current_exception();
                }
            }
            if (st != TRN_SUCCESS || finished) {
                collective_finished(w->obs_, st == TRN_SUCCESS);
                w->source_rank_ = r.is_send ? r.peer : r.source;
                {
                    std::lock_guard<std::mutex> lk(mutex_);
                    p2p_pending_.remove(w);
                }
                w->complete(error);
                progressed = true;
            } else if (r.done != done || r.stage != stage) {
                progressed = true;
            }
        }
        if (progressed) {
            idle_since = 0;
            continue;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
        if (idle_since == 0) idle_since = ns;
        if (ns - idle_since < 2000000ull) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, nullptr);
        }
    }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::p2p(std::vector<at::Tensor> &tensors, int peer,
                                                       int tag, bool is_send) {
    const char *what = is_send ? "send" : "recv";
    {
        // Shut down or aborted (abort() shuts down): nothing may "succeed".
        std::lock_guard<std::mutex> lk(mutex_);
        check_open();
    }
    at::Tensor t = single(tensors, what);
    check_output(t, what);
    TORCH_CHECK_VALUE(peer == -1 || (peer >= 0 && peer < size_ && peer != rank_), "neuron ", what,
                      ": peer ", peer, " is not another rank of this group of ", size_);
    sync_stream(t);
    if (gloo_) {
        std::vector<at::Tensor> a{byte_alias(t)};
        auto inner = is_send    ? gloo_->send(a, peer, tag)
                     : peer < 0 ? gloo_->recvAnysource(a, tag)
                                : gloo_->recv(a, peer, tag);
        // A thin forwarder: Gloo completes it; keep the tensor alive.
        struct Forward : NeuronWork {
            using NeuronWork::NeuronWork;
            bool isCompleted() override { return inner_->isCompleted(); }
            bool isSuccess() const override { return inner_->isSuccess(); }
            std::exception_ptr exception() const override { return inner_->exception(); }
            int sourceRank() const override { return inner_->sourceRank(); }
            bool wait(std::chrono::milliseconds timeout) override { return inner_->wait(timeout); }
        };
        auto w = c10::make_intrusive<Forward>(
            rank_, is_send ? c10d::OpType::SEND : c10d::OpType::RECV, what,
            std::vector<at::Tensor>{t, a[0]}, std::vector<at::Tensor>{t}, t.device());
        w->inner_ = inner;
        return w;
    }
    auto w = c10::make_intrusive<NeuronWork>(
        rank_,
        is_send ? c10d::OpType::SEND
                : (peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV),
        what, std::vector<at::Tensor>{t}, std::vector<at::Tensor>{t}, t.device());
    w->req_.is_send = is_send;
    w->req_.peer = peer;
    w->req_.tag = tag;
    w->req_.buf = ptr(t);
    w->req_.nbytes = nbytes(t);
    // Timed from posting: a receive mostly waits for its sender.
    w->obs_ = collective_describe(is_send ? "neuron:send" : "neuron:recv", t.device().index(),
                                  rank_, size_, "shm", {t},
                                  is_send ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{t});
    collective_started(w->obs_);
    {
        std::lock_guard<std::mutex> lk(mutex_);
        check_open();
        p2p_pending_.push_back(w);
    }
    p2p_cv_.notify_one();
    return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor> &tensors,
                                                        int dstRank, int tag) {
    return p2p(tensors, dstRank, tag, true);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor> &tensors,
                                                        int srcRank, int tag) {
    return p2p(tensors, srcRank, tag, false);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recvAnysource(std::vector<at::Tensor> &tensors,
                                                                 int tag) {
    return p2p(tensors, -1, tag, false);
}

// ---- reductions ------------------------------------------------------------

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::allreduce(std::vector<at::Tensor> &tensors,
                              const c10d::AllreduceOptions &opts) try {
    std::vector<at::Tensor> one{single(tensors, "all_reduce")};
    c10d::AllreduceCoalescedOptions co;
    co.reduceOp = opts.reduceOp;
    co.timeout = opts.timeout;
    return allreduce_coalesced(one, co);
} catch (...) {
    refuse_everywhere(c10d::OpType::ALLREDUCE, "all_reduce", "neuron:all_reduce");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                        const c10d::AllreduceCoalescedOptions &opts) try {
    TORCH_CHECK(!tensors.empty(), "neuron all_reduce: no tensors");
    check_outputs(tensors, "all_reduce");
    std::vector<trn_dtype> dts;
    std::vector<RedOp> ops;
    for (const auto &t : tensors) {
        dts.push_back(reduce_dtype(t, "all_reduce"));
        if (gloo_) check_gloo_reducible(t);
        ops.push_back(to_redop(opts.reduceOp, dts.back()));
    }
    sync_stream(tensors[0]);
    Body body = [this, tensors, dts, ops, opts] {
        for (size_t i = 0; i < tensors.size(); i++) {
            const at::Tensor &t = tensors[i];
            if (gloo_) {
                gloo_agree(*gloo_, rank_, size_,
                           agreement("all_reduce", &t, -1, i, tensors.size()));
                std::vector<at::Tensor> a{cpu_alias(t)};
                c10d::AllreduceOptions o;
                o.reduceOp = c10d::ReduceOp(ops[i].plain);
                o.timeout = opts.timeout;
                gloo_->allreduce(a, o)->wait();
                finish_post(t, dts[i], ops[i], size_);
            } else {
                agree_next(comm_, nullptr, -1, i, tensors.size());
                COMM_CHECK(trn_comm_allreduce(comm_, ptr(t), ptr(t), t.numel(), dts[i], ops[i].op,
                                              &ops[i].post));
            }
        }
    };
    return enqueue(c10d::OpType::ALLREDUCE, "neuron:all_reduce", tensors, tensors,
                   tensors[0].device(), body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::ALLREDUCE, "all_reduce", "neuron:all_reduce");
    throw;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(std::vector<at::Tensor> &tensors,
                                                          const c10d::ReduceOptions &opts) try {
    at::Tensor t = single(tensors, "reduce");
    check_output(t, "reduce");
    trn_dtype dt = reduce_dtype(t, "reduce");
    if (gloo_) check_gloo_reducible(t);
    RedOp op = to_redop(opts.reduceOp, dt);
    int root = static_cast<int>(opts.rootRank);
    TORCH_CHECK_VALUE(root >= 0 && root < size_, "neuron reduce: root ", root,
                      " is not a rank of this group of ", size_);
    sync_stream(t);
    Body body = [this, t, dt, op, root, opts] {
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("reduce", &t, root));
            std::vector<at::Tensor> a{cpu_alias(t)};
            c10d::ReduceOptions o = opts;
            o.reduceOp = c10d::ReduceOp(op.plain);
            gloo_->reduce(a, o)->wait();
            if (rank_ == root) finish_post(t, dt, op, size_);
        } else {
            COMM_CHECK(
                trn_comm_reduce(comm_, ptr(t), ptr(t), t.numel(), dt, op.op, &op.post, root));
        }
    };
    return enqueue(c10d::OpType::REDUCE, "neuron:reduce", {t}, {t}, t.device(), body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::REDUCE, "reduce", "neuron:reduce");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                         const c10d::ReduceScatterOptions &opts) try {
    std::vector<at::Tensor> outs{output}, ins{input};
    return reduce_scatter_tensor_coalesced(outs, ins, opts);
} catch (...) {
    refuse_everywhere(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter",
                      "neuron:reduce_scatter");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                    std::vector<at::Tensor> &inputs,
                                                    const c10d::ReduceScatterOptions &opts) try {
    TORCH_CHECK(!outputs.empty() && outputs.size() == inputs.size(),
                "neuron reduce_scatter: ", outputs.size(), " outputs for ", inputs.size(),
                " inputs");
    check_outputs(outputs, "reduce_scatter");
    std::vector<at::Tensor> ins = inputs_of(inputs, "reduce_scatter");
    std::vector<trn_dtype> dts;
    std::vector<RedOp> ops;
    for (size_t i = 0; i < ins.size(); i++) {
        TORCH_CHECK_VALUE(ins[i].scalar_type() == outputs[i].scalar_type() &&
                              ins[i].numel() == outputs[i].numel() * size_,
                          "neuron reduce_scatter: input ", ins[i].sizes(), " ",
                          ins[i].scalar_type(), " must hold ", size_, " x the output ",
                          outputs[i].sizes(), " ", outputs[i].scalar_type());
        dts.push_back(reduce_dtype(ins[i], "reduce_scatter"));
        if (gloo_) check_gloo_reducible(ins[i]);
        ops.push_back(to_redop(opts.reduceOp, dts.back()));
    }
    sync_stream(ins[0]);
    std::vector<at::Tensor> keep = ins;
    keep.insert(keep.end(), outputs.begin(), outputs.end());
    Body body = [this, outputs, ins, dts, ops, opts] {
        for (size_t i = 0; i < ins.size(); i++) {
            if (gloo_) {
                gloo_agree(*gloo_, rank_, size_,
                           agreement("reduce_scatter", &ins[i], -1, i, ins.size()));
                at::Tensor o = cpu_alias(outputs[i]), in = cpu_alias(ins[i]);
                c10d::ReduceScatterOptions go = opts;
                go.reduceOp = c10d::ReduceOp(ops[i].plain);
                gloo_->_reduce_scatter_base(o, in, go)->wait();
                finish_post(outputs[i], dts[i], ops[i], size_);
            } else {
                agree_next(comm_, nullptr, -1, i, ins.size());
                COMM_CHECK(trn_comm_reduce_scatter(comm_, ptr(ins[i]), ptr(outputs[i]),
                                                   outputs[i].numel(), dts[i], ops[i].op,
                                                   &ops[i].post));
            }
        }
    };
    return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "neuron:reduce_scatter", keep, outputs,
                   outputs[0].device(), body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter",
                      "neuron:reduce_scatter");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::reduce_scatter(std::vector<at::Tensor> &outputs,
                                   std::vector<std::vector<at::Tensor>> &inputs,
                                   const c10d::ReduceScatterOptions &opts) try {
    at::Tensor out = single(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                "neuron reduce_scatter: expected one list of ", size_, " input tensors");
    check_output(out, "reduce_scatter");
    std::vector<at::Tensor> ins = inputs_of(inputs[0], "reduce_scatter");
    for (const auto &t : ins) check_same(t, out, "reduce_scatter");
    // One contiguous input, then the tensor form.
    at::Tensor flat = at::empty({(int64_t)size_ * out.numel()}, out.options());
    sync_stream(out);
    for (int r = 0; r < size_; r++)
        if (nbytes(ins[r]))
            std::memcpy((unsigned char *)flat.data_ptr() + r * nbytes(out), ins[r].data_ptr(),
                        nbytes(out));
    at::Tensor o = out.view({-1});
    std::vector<at::Tensor> os{o}, is{flat};
    return reduce_scatter_tensor_coalesced(os, is, opts);
} catch (...) {
    refuse_everywhere(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", "neuron:reduce_scatter");
    throw;
}

// ---- data movement ---------------------------------------------------------

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::broadcast(std::vector<at::Tensor> &tensors,
                              const c10d::BroadcastOptions &opts) try {
    at::Tensor t = single(tensors, "broadcast");
    check_output(t, "broadcast");
    int root = static_cast<int>(opts.rootRank);
    TORCH_CHECK_VALUE(root >= 0 && root < size_, "neuron broadcast: root ", root,
                      " is not a rank of this group of ", size_);
    sync_stream(t);
    Body body = [this, t, root, opts] {
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("broadcast", &t, root));
            std::vector<at::Tensor> a{byte_alias(t)};
            gloo_->broadcast(a, opts)->wait();
        } else {
            agree_next(comm_, &t);
            COMM_CHECK(trn_comm_broadcast(comm_, ptr(t), nbytes(t), root));
        }
    };
    return enqueue(c10d::OpType::BROADCAST, "neuron:broadcast", {t}, {t}, t.device(), body,
                   opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::BROADCAST, "broadcast", "neuron:broadcast");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                              std::vector<at::Tensor> &inputs,
                              const c10d::AllgatherOptions &opts) try {
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                "neuron all_gather: expected one list of ", size_, " output tensors");
    std::vector<at::Tensor> in{as_input(single(inputs, "all_gather"), "all_gather")};
    std::vector<std::vector<at::Tensor>> outs{outputs[0]};
    return allgather_coalesced(outs, in, opts);
} catch (...) {
    refuse_everywhere(c10d::OpType::ALLGATHER, "all_gather", "neuron:all_gather");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::AllgatherOptions &opts) try {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(),
                "neuron all_gather: ", outputs.size(), " output lists for ", inputs.size(),
                " inputs");
    std::vector<at::Tensor> ins = inputs_of(inputs, "all_gather");
    std::vector<at::Tensor> flat_outs, keep = ins;
    for (size_t i = 0; i < ins.size(); i++) {
        TORCH_CHECK((int)outputs[i].size() == size_,
                    "neuron all_gather: "
                    "expected ",
                    size_, " output tensors, got ", outputs[i].size());
        check_outputs(outputs[i], "all_gather");
        for (const auto &o : outputs[i]) {
            TORCH_CHECK_VALUE(o.scalar_type() == ins[i].scalar_type(),
                              "neuron all_gather: output dtype ", o.scalar_type(),
                              " differs from input dtype ", ins[i].scalar_type());
            flat_outs.push_back(o);
        }
    }
    keep.insert(keep.end(), flat_outs.begin(), flat_outs.end());
    sync_stream(ins[0]);
    Body body = [this, outputs, ins, opts] {
        for (size_t i = 0; i < ins.size(); i++) {
            if (gloo_) {
                gloo_agree(*gloo_, rank_, size_,
                           agreement("all_gather", &ins[i], -1, i, ins.size()));
                std::vector<std::vector<at::Tensor>> o{cpu_aliases(outputs[i])};
                std::vector<at::Tensor> in{byte_alias(ins[i])};
                gloo_->allgather(o, in, opts)->wait();
                continue;
            }
            std::vector<void *> dst(size_);
            std::vector<size_t> len(size_);
            for (int r = 0; r < size_; r++) {
                dst[r] = ptr(outputs[i][r]);
                len[r] = nbytes(outputs[i][r]);
                // A zero-size part still needs a non-null "read" marker.
                if (!dst[r]) dst[r] = (void *)&len[r];
            }
            agree_next(comm_, &ins[i], -1, i, ins.size());
            COMM_CHECK(trn_comm_exchange(comm_, "all_gather", ptr(ins[i]), nbytes(ins[i]), nullptr,
                                         nullptr, dst.data(), len.data()));
        }
    };
    return enqueue(c10d::OpType::ALLGATHER, "neuron:all_gather", keep, flat_outs, ins[0].device(),
                   body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::ALLGATHER, "all_gather", "neuron:all_gather");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::_allgather_base(at::Tensor &output, at::Tensor &input,
                                    const c10d::AllgatherOptions &opts) try {
    std::vector<at::Tensor> outs{output}, ins{input};
    return allgather_into_tensor_coalesced(outs, ins, opts);
} catch (...) {
    refuse_everywhere(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor",
                      "neuron:all_gather_into_tensor");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                    std::vector<at::Tensor> &inputs,
                                                    const c10d::AllgatherOptions &opts) try {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(),
                "neuron all_gather_into_tensor: ", outputs.size(), " outputs for ", inputs.size(),
                " inputs");
    check_outputs(outputs, "all_gather_into_tensor");
    std::vector<at::Tensor> ins = inputs_of(inputs, "all_gather_into_tensor");
    for (size_t i = 0; i < ins.size(); i++)
        TORCH_CHECK_VALUE(ins[i].scalar_type() == outputs[i].scalar_type() &&
                              outputs[i].numel() == ins[i].numel() * size_,
                          "neuron all_gather_into_tensor: output ", outputs[i].sizes(), " ",
                          outputs[i].scalar_type(), " must hold ", size_, " x the input ",
                          ins[i].sizes(), " ", ins[i].scalar_type());
    std::vector<at::Tensor> keep = ins;
    keep.insert(keep.end(), outputs.begin(), outputs.end());
    sync_stream(ins[0]);
    Body body = [this, outputs, ins, opts] {
        for (size_t i = 0; i < ins.size(); i++) {
            if (gloo_) {
                gloo_agree(*gloo_, rank_, size_,
                           agreement("all_gather", &ins[i], -1, i, ins.size()));
                at::Tensor o = byte_alias(outputs[i]), in = byte_alias(ins[i]);
                gloo_->_allgather_base(o, in, opts)->wait();
                continue;
            }
            size_t part = nbytes(ins[i]);
            std::vector<void *> dst(size_);
            std::vector<size_t> len(size_, part);
            for (int r = 0; r < size_; r++)
                dst[r] = part ? (unsigned char *)outputs[i].data_ptr() + r * part : (void *)&len[r];
            agree_next(comm_, &ins[i], -1, i, ins.size());
            COMM_CHECK(trn_comm_exchange(comm_, "all_gather_into_tensor", ptr(ins[i]), part,
                                         nullptr, nullptr, dst.data(), len.data()));
        }
    };
    return enqueue(c10d::OpType::_ALLGATHER_BASE, "neuron:all_gather_into_tensor", keep, outputs,
                   outputs[0].device(), body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor",
                      "neuron:all_gather_into_tensor");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::gather(std::vector<std::vector<at::Tensor>> &outputs,
                           std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts) try {
    at::Tensor in = as_input(single(inputs, "gather"), "gather");
    int root = static_cast<int>(opts.rootRank);
    TORCH_CHECK_VALUE(root >= 0 && root < size_, "neuron gather: root ", root,
                      " is not a rank of this group of ", size_);
    std::vector<at::Tensor> outs;
    if (rank_ == root) {
        TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                    "neuron gather: the root needs one list of ", size_, " output tensors");
        outs = outputs[0];
        check_outputs(outs, "gather");
        for (const auto &o : outs)
            TORCH_CHECK_VALUE(o.scalar_type() == in.scalar_type(), "neuron gather: output dtype ",
                              o.scalar_type(), " differs from input dtype ", in.scalar_type());
    } else {
        TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                    "neuron gather: only the root passes output tensors");
    }
    std::vector<at::Tensor> keep = outs;
    keep.push_back(in);
    sync_stream(in);
    Body body = [this, outs, in, root, opts] {
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("gather", &in, root));
            std::vector<std::vector<at::Tensor>> o;
            if (rank_ == root) o.push_back(cpu_aliases(outs));
            std::vector<at::Tensor> i{byte_alias(in)};
            gloo_->gather(o, i, opts)->wait();
            return;
        }
        std::vector<void *> dst(size_, nullptr);
        std::vector<size_t> len(size_, 0);
        for (size_t r = 0; r < outs.size(); r++) {
            len[r] = nbytes(outs[r]);
            dst[r] = len[r] ? outs[r].data_ptr() : (void *)&len[r];
        }
        agree_next(comm_, &in, root);
        COMM_CHECK(trn_comm_exchange(comm_, "gather", ptr(in), nbytes(in), nullptr, nullptr,
                                     outs.empty() ? nullptr : dst.data(), len.data()));
    };
    return enqueue(c10d::OpType::GATHER, "neuron:gather", keep, outs, in.device(), body,
                   opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::GATHER, "gather", "neuron:gather");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::scatter(std::vector<at::Tensor> &outputs,
                            std::vector<std::vector<at::Tensor>> &inputs,
                            const c10d::ScatterOptions &opts) try {
    at::Tensor out = single(outputs, "scatter");
    check_output(out, "scatter");
    int root = static_cast<int>(opts.rootRank);
    TORCH_CHECK_VALUE(root >= 0 && root < size_, "neuron scatter: root ", root,
                      " is not a rank of this group of ", size_);
    std::vector<at::Tensor> ins;
    if (rank_ == root) {
        TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                    "neuron scatter: the root needs one list of ", size_, " input tensors");
        ins = inputs_of(inputs[0], "scatter");
        for (const auto &i : ins)
            TORCH_CHECK_VALUE(i.scalar_type() == out.scalar_type(), "neuron scatter: input dtype ",
                              i.scalar_type(), " differs from output dtype ", out.scalar_type());
    }
    std::vector<at::Tensor> keep = ins;
    keep.push_back(out);
    sync_stream(out);
    Body body = [this, out, ins, root, opts] {
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("scatter", &out, root));
            std::vector<std::vector<at::Tensor>> i;
            if (rank_ == root) i.push_back(cpu_aliases(ins));
            std::vector<at::Tensor> o{byte_alias(out)};
            gloo_->scatter(o, i, opts)->wait();
            return;
        }
        std::vector<unsigned char> src = concat_bytes(ins);
        std::vector<size_t> off(size_, 0), plen(size_, 0);
        size_t at = 0;
        for (size_t r = 0; r < ins.size(); r++) {
            off[r] = at;
            plen[r] = nbytes(ins[r]);
            at += plen[r];
        }
        std::vector<void *> dst(size_, nullptr);
        std::vector<size_t> len(size_, 0);
        len[root] = nbytes(out);
        dst[root] = len[root] ? out.data_ptr() : (void *)&len[root];
        agree_next(comm_, &out, root);
        COMM_CHECK(trn_comm_exchange(comm_, "scatter", src.data(), src.size(), off.data(),
                                     plen.data(), dst.data(), len.data()));
    };
    return enqueue(c10d::OpType::SCATTER, "neuron:scatter", keep, {out}, out.device(), body,
                   opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::SCATTER, "scatter", "neuron:scatter");
    throw;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNeuron::alltoall_base(at::Tensor &output, at::Tensor &input,
                                  std::vector<int64_t> &outSplits, std::vector<int64_t> &inSplits,
                                  const c10d::AllToAllOptions &opts) try {
    check_output(output, "all_to_all_single");
    at::Tensor in = as_input(input, "all_to_all_single");
    TORCH_CHECK_VALUE(in.scalar_type() == output.scalar_type(),
                      "neuron all_to_all_single: input dtype ", in.scalar_type(),
                      " differs from output dtype ", output.scalar_type());
    // Split sizes count rows of dim 0; none means equal parts.
    auto parts = [&](const at::Tensor &t, const std::vector<int64_t> &splits, const char *which) {
        int64_t rows = t.dim() ? t.size(0) : 1;
        size_t row = rows ? nbytes(t) / rows : 0;
        std::vector<size_t> len(size_);
        if (splits.empty()) {
            TORCH_CHECK_VALUE(rows % size_ == 0, "neuron all_to_all_single: ", which, " dim 0 (",
                              rows, ") does not split evenly into ", size_);
            for (auto &l : len) l = row * (rows / size_);
        } else {
            TORCH_CHECK_VALUE((int)splits.size() == size_, "neuron all_to_all_single: ", which,
                              " has ", splits.size(), " split sizes for ", size_, " ranks");
            int64_t sum = 0;
            for (int r = 0; r < size_; r++) {
                TORCH_CHECK_VALUE(splits[r] >= 0, "negative split size");
                sum += splits[r];
                len[r] = row * splits[r];
            }
            TORCH_CHECK_VALUE(sum == rows, "neuron all_to_all_single: ", which,
                              " split sizes add up to ", sum, ", dim 0 is ", rows);
        }
        return len;
    };
    std::vector<size_t> send = parts(in, inSplits, "input");
    std::vector<size_t> recv = parts(output, outSplits, "output");
    sync_stream(in);
    at::Tensor out = output;
    std::vector<int64_t> os = outSplits, is = inSplits;
    Body body = [this, out, in, send, recv, os, is, opts]() mutable {
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("all_to_all", &in));
            // Bytes, so split sizes count bytes too (equal rows stay equal).
            at::Tensor o = byte_alias(out), i = byte_alias(in);
            std::vector<int64_t> ob, ib;
            if (!os.empty()) ob.assign(recv.begin(), recv.end());
            if (!is.empty()) ib.assign(send.begin(), send.end());
            gloo_->alltoall_base(o, i, ob, ib, opts)->wait();
            return;
        }
        std::vector<size_t> off(size_), dlen = recv;
        std::vector<void *> dst(size_);
        size_t s = 0, d = 0;
        for (int r = 0; r < size_; r++) {
            off[r] = s;
            s += send[r];
            dst[r] = dlen[r] ? (unsigned char *)out.data_ptr() + d : (void *)&dlen[r];
            d += dlen[r];
        }
        agree_next(comm_, &in);
        COMM_CHECK(trn_comm_exchange(comm_, "all_to_all", ptr(in), nbytes(in), off.data(),
                                     send.data(), dst.data(), dlen.data()));
    };
    return enqueue(c10d::OpType::ALLTOALL_BASE, "neuron:all_to_all", {in, out}, {out}, out.device(),
                   body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::ALLTOALL_BASE, "all_to_all", "neuron:all_to_all");
    throw;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(std::vector<at::Tensor> &outputs,
                                                            std::vector<at::Tensor> &inputs,
                                                            const c10d::AllToAllOptions &opts) try {
    TORCH_CHECK((int)outputs.size() == size_ && (int)inputs.size() == size_,
                "neuron all_to_all: expected ", size_, " input and output tensors, got ",
                inputs.size(), " and ", outputs.size());
    check_outputs(outputs, "all_to_all");
    std::vector<at::Tensor> ins = inputs_of(inputs, "all_to_all");
    std::vector<at::Tensor> keep = ins;
    keep.insert(keep.end(), outputs.begin(), outputs.end());
    sync_stream(ins[0]);
    Body body = [this, outputs, ins, opts] {
        std::vector<unsigned char> src = concat_bytes(ins);
        std::vector<size_t> off(size_), plen(size_), dlen(size_);
        std::vector<void *> dst(size_);
        size_t at = 0;
        for (int r = 0; r < size_; r++) {
            off[r] = at;
            plen[r] = nbytes(ins[r]);
            at += plen[r];
            dlen[r] = nbytes(outputs[r]);
        }
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("all_to_all", &ins[0]));
            // Gloo has no list form: one byte tensor each way, split sizes
            // in bytes.
            auto u8 = at::TensorOptions().dtype(at::kByte);
            at::Tensor i = at::from_blob(src.data(), {(int64_t)src.size()}, u8);
            size_t total = 0;
            for (auto l : dlen) total += l;
            at::Tensor o = at::empty({(int64_t)total}, u8);
            std::vector<int64_t> is(plen.begin(), plen.end()), os(dlen.begin(), dlen.end());
            gloo_->alltoall_base(o, i, os, is, opts)->wait();
            size_t d = 0;
            for (int r = 0; r < size_; r++) {
                if (dlen[r])
                    std::memcpy(outputs[r].data_ptr(), (unsigned char *)o.data_ptr() + d, dlen[r]);
                d += dlen[r];
            }
            return;
        }
        for (int r = 0; r < size_; r++) dst[r] = dlen[r] ? outputs[r].data_ptr() : (void *)&dlen[r];
        agree_next(comm_, &ins[0]);
        COMM_CHECK(trn_comm_exchange(comm_, "all_to_all", src.data(), src.size(), off.data(),
                                     plen.data(), dst.data(), dlen.data()));
    };
    return enqueue(c10d::OpType::ALLTOALL, "neuron:all_to_all", keep, outputs, outputs[0].device(),
                   body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::ALLTOALL, "all_to_all", "neuron:all_to_all");
    throw;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions &opts) try {
    // The device the caller names (device_ids, or an indexed device), else
    // the current one.
    c10::Device device(kNeuron, current_device());
    if (!opts.device_ids.empty())
        device = c10::Device(kNeuron, static_cast<c10::DeviceIndex>(opts.device_ids[0]));
    else if (opts.device && opts.device->type() == kNeuron && opts.device->has_index())
        device = *opts.device;
    check_device(device.index());
    // Work queued before the barrier on this device finishes first.
    TRN_CHECK(trn_stream_synchronize(current_trn_stream(device.index())));
    Body body = [this, opts] {
        if (gloo_) {
            gloo_agree(*gloo_, rank_, size_, agreement("barrier", nullptr));
            gloo_->barrier(opts)->wait();
        } else {
            COMM_CHECK(trn_comm_barrier(comm_));
        }
    };
    return enqueue(c10d::OpType::BARRIER, "neuron:barrier", {}, {}, device, body, opts.timeout);
} catch (...) {
    refuse_everywhere(c10d::OpType::BARRIER, "barrier", "neuron:barrier");
    throw;
}

}  // namespace neuron
