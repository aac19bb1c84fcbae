// distributed/process_group.h - the `neuron` c10d backend: adapts c10d's Backend /
// Work interface to libtrn's shared-memory collective engine (ranks on one
// host) or to a ProcessGroupGloo running on CPU aliases of device memory
// (ranks on several hosts; device memory is host memory, so no staging).
//
// Threads: collectives run in call order on one worker thread (so a Work is
// asynchronous and DDP can overlap them with backward); send/recv progress
// together on a second thread (a pipeline stage sends and receives at once).
// Callers' streams are synchronized before an op is queued, so the op sees
// everything queued before it on the current stream; Work::wait() blocks
// until the results are in device memory, which every stream then sees.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "distributed/collective_observe.h"
#include "trn/collectives.h"

namespace neuron {

class NeuronWork : public c10d::Work {
public:
    NeuronWork(int rank, c10d::OpType type, const char *title, std::vector<at::Tensor> keep,
               std::vector<at::Tensor> outputs, c10::Device device);
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
    int sourceRank() const override { return source_rank_; }
    // Marks the work (and its future) done, with an error or not.
    void complete(std::exception_ptr error);

    std::vector<at::Tensor> keep_;  // inputs and temporaries, alive until done
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    int source_rank_ = -1;
    trn_p2p_req req_{};
    CollectiveRecord obs_;  // profiler / metrics / log view (shm send, recv)
    // Gloo send/recv run asynchronously inside Gloo; the work forwards to it.
    c10::intrusive_ptr<c10d::Work> inner_;
};

class ProcessGroupNeuron : public c10d::Backend {
public:
    // `region_fd` >= 0: attach to the shared region (one host); otherwise
    // `gloo` carries every op (several hosts, or forced).
    ProcessGroupNeuron(int rank, int size, int64_t timeout_ms, int region_fd,
                       c10::intrusive_ptr<c10d::Backend> gloo);
    ~ProcessGroupNeuron() override;

    const std::string getBackendName() const override { return "neuron"; }
    std::string transport() const { return gloo_ ? "gloo" : "shm"; }
    void setTimeout(std::chrono::milliseconds timeout) override;
    void shutdown() override;
    void abort() override;

    // Splitting (dist.split_group): the sub-group gets its own shared region,
    // set up through the split's store by the same rendezvous as the world
    // group's. That rendezvous lives in Python (torch_neuronx.distributed),
    // which installs `split_factory` when it binds this class.
    using SplitFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
        const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
        std::chrono::milliseconds timeout)>;
    static SplitFactory split_factory;
    bool supportsSplitting() const override { return true; }
    // Collectives queued on this group since it was made (or the count was
    // reset): equal on every rank as long as ranks call the same collectives,
    // which is what c10d's sequence number checks rely on.
    void setSequenceNumberForGroup() override { seq_ = 0; }
    uint64_t getSequenceNumberForGroup() override { return seq_; }
    c10::intrusive_ptr<Options> getBackendOptions() override;
    c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &store,
                                            const std::vector<int> &ranks,
                                            const c10::intrusive_ptr<Options> &opts) override;

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs,
                        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &outputSplitSizes,
                                                 std::vector<int64_t> &inputSplitSizes,
                                                 const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dstRank,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int srcRank,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                 int tag) override;

private:
    using Body = std::function<void()>;
    struct Task {
        c10::intrusive_ptr<NeuronWork> work;
        Body body;
        int64_t timeout_ms;
        CollectiveRecord obs;
    };

    c10::intrusive_ptr<NeuronWork> enqueue(c10d::OpType type, const char *title,
                                           std::vector<at::Tensor> keep,
                                           std::vector<at::Tensor> outputs, c10::Device device,
                                           Body body, std::chrono::milliseconds timeout);
    c10::intrusive_ptr<c10d::Work> p2p(std::vector<at::Tensor> &tensors, int peer, int tag,
                                       bool is_send);
    // Called from each collective's handler while its exception is in
    // flight: queues a stand-in that fails this call on every rank (see the
    // definition).
    void refuse_everywhere(c10d::OpType type, const char *what, const char *title);
    void worker_loop();
    void p2p_loop();
    void check_open() const;

    trn_comm *comm_ = nullptr;
    c10::intrusive_ptr<c10d::Backend> gloo_;
    std::atomic<int64_t> timeout_ms_;
    std::atomic<uint64_t> seq_{0};

    std::mutex mutex_;
    // One condition per thread, so that queueing a collective does not wake
    // the send/recv thread (and a send the collective worker) for nothing:
    // DDP queues a bucket from autograd's thread while both would contend
    // for the same two cores.
    std::condition_variable cv_;      // queue_ (the collective worker)
    std::condition_variable p2p_cv_;  // p2p_pending_ (the send/recv thread)
    std::deque<Task> queue_;
    std::list<c10::intrusive_ptr<NeuronWork>> p2p_pending_;
    bool stop_ = false;
    bool busy_ = false;
    std::thread worker_, p2p_worker_;
};

}  // namespace neuron
