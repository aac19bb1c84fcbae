// NeuronGenerator.h - the per-device random generator.
//
// Random ops run through the CPU fallback, whose kernels only accept CPU
// generators. So a neuron generator owns a CPU generator holding its state;
// the fallback hands that inner generator to the CPU kernel. Seeding,
// get_state and set_state act on it, so torch.neuron.manual_seed makes neuron
// random streams reproducible and independent of the CPU default generator.
#pragma once

#include <ATen/core/Generator.h>

namespace neuron {

struct NeuronGeneratorImpl final : public c10::GeneratorImpl {
    explicit NeuronGeneratorImpl(c10::DeviceIndex index,
                                 uint64_t seed = c10::default_rng_seed_val);

    void set_current_seed(uint64_t seed) override;
    void set_offset(uint64_t offset) override;
    uint64_t get_offset() const override;
    uint64_t current_seed() const override;
    uint64_t seed() override;
    void set_state(const c10::TensorImpl &new_state) override;
    c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
    static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

    // The CPU generator CPU kernels draw from on this generator's behalf.
    const at::Generator &cpu_generator() const { return cpu_; }

  private:
    NeuronGeneratorImpl *clone_impl() const override;
    at::Generator cpu_;
};

// Default generator of a device (created on first use, lives forever).
const at::Generator &default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

}  // namespace neuron
