// NeuronGenerator.cpp - per-device generators; see NeuronGenerator.h.
#include "NeuronGenerator.h"

#include <ATen/CPUGeneratorImpl.h>

#include <deque>
#include <mutex>

#include "neuron_device.h"

namespace neuron {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kNeuron, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::detail::createCPUGenerator(seed)) {}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
    cpu_.set_current_seed(seed);
}
void NeuronGeneratorImpl::set_offset(uint64_t offset) { cpu_.set_offset(offset); }
uint64_t NeuronGeneratorImpl::get_offset() const { return cpu_.get_offset(); }
uint64_t NeuronGeneratorImpl::current_seed() const { return cpu_.current_seed(); }
uint64_t NeuronGeneratorImpl::seed() { return cpu_.seed(); }

void NeuronGeneratorImpl::set_state(const c10::TensorImpl &new_state) {
    cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
    return cpu_.unsafeGetGeneratorImpl()->get_state();
}

NeuronGeneratorImpl *NeuronGeneratorImpl::clone_impl() const {
    auto *copy = new NeuronGeneratorImpl(device().index());
    copy->cpu_ = cpu_.clone();
    return copy;
}

const at::Generator &default_generator(c10::DeviceIndex index) {
    static std::mutex mutex;
    // deque: references to earlier elements survive later growth.
    static std::deque<at::Generator> generators;
    if (index < 0)
        index = current_device();
    check_device(index);
    std::lock_guard<std::mutex> lock(mutex);
    while (generators.size() <= static_cast<size_t>(index)) {
        auto dev = static_cast<c10::DeviceIndex>(generators.size());
        generators.push_back(at::make_generator<NeuronGeneratorImpl>(dev));
    }
    return generators[static_cast<size_t>(index)];
}

at::Generator new_generator(c10::DeviceIndex index) {
    if (index < 0)
        index = current_device();
    check_device(index);
    return at::make_generator<NeuronGeneratorImpl>(index);
}

}  // namespace neuron
