// runtime/generator.cpp - per-device generators; see runtime/generator.h.
#include "runtime/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "runtime/device.h"
#include "trn/random.h"

namespace neuron {

namespace {
// get_state's layout, CUDA's: seed, then offset, native byte order.
constexpr int64_t kStateBytes = 2 * sizeof(uint64_t);
}  // namespace

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kNeuron, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

// A new seed starts its stream from the beginning, as CUDA's.
void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
}
void NeuronGeneratorImpl::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t NeuronGeneratorImpl::get_offset() const { return offset_; }
uint64_t NeuronGeneratorImpl::current_seed() const { return seed_; }

uint64_t NeuronGeneratorImpl::seed() {
    const uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
}

void NeuronGeneratorImpl::set_state(const c10::TensorImpl &new_state) {
    at::detail::check_rng_state(new_state);
    TORCH_CHECK(new_state.numel() == kStateBytes, "RNG state is wrong size: a neuron generator's ",
                "state is ", kStateBytes, " bytes (seed, offset), got ", new_state.numel());
    uint64_t v[2];
    std::memcpy(v, new_state.data(), sizeof v);
    seed_ = v[0];
    offset_ = v[1];
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
    at::Tensor state = at::detail::empty_cpu({kStateBytes}, at::kByte, std::nullopt, std::nullopt,
                                             std::nullopt, std::nullopt);
    const uint64_t v[2] = {seed_, offset_};
    std::memcpy(state.data_ptr(), v, sizeof v);
    return state.getIntrusivePtr();
}

NeuronGeneratorImpl *NeuronGeneratorImpl::clone_impl() const {
    auto *copy = new NeuronGeneratorImpl(device().index(), seed_);
    copy->offset_ = offset_;
    return copy;
}

const at::Generator &default_generator(c10::DeviceIndex index) {
    static std::mutex mutex;
    // deque: references to earlier elements survive later growth.
    static std::deque<at::Generator> generators;
    if (index < 0) index = current_device();
    check_device(index);
    std::lock_guard<std::mutex> lock(mutex);
    while (generators.size() <= static_cast<size_t>(index)) {
        auto dev = static_cast<c10::DeviceIndex>(generators.size());
        generators.push_back(at::make_generator<NeuronGeneratorImpl>(dev));
    }
    return generators[static_cast<size_t>(index)];
}

at::Generator new_generator(c10::DeviceIndex index) {
    if (index < 0) index = current_device();
    check_device(index);
    return at::make_generator<NeuronGeneratorImpl>(index);
}

CounterRange reserve_counters(const std::optional<at::Generator> &gen, c10::DeviceIndex index,
                              uint64_t count) {
    at::Generator g = gen.has_value() && gen->defined() ? *gen : default_generator(index);
    TORCH_CHECK(g.device().type() == kNeuron,
                "random ops on neuron need a neuron generator, got one for ", g.device());
    auto *impl = g.get<NeuronGeneratorImpl>();
    // The seed is read under the same lock as the offset it goes with.
    std::lock_guard<std::mutex> lock(impl->mutex_);
    const uint64_t seed = impl->current_seed();
    const uint64_t offset = impl->get_offset();
    impl->set_offset(offset + (count + 3) / 4 * 4);
    return {seed, offset};
}

uint64_t draw_key(const std::optional<at::Generator> &gen, c10::DeviceIndex index) {
    const CounterRange r = reserve_counters(gen, index, 4);
    return trn_random_key(r.seed, r.offset);
}

at::Generator fallback_cpu_generator(const at::Generator &gen) {
    return at::detail::createCPUGenerator(draw_key(gen, gen.device().index()));
}

}  // namespace neuron
