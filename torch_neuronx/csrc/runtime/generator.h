// runtime/generator.h - the per-device random generator.
//
// The state is (seed, offset), as CUDA's Philox generator: neuron's random
// kernels are counter-based (trn/random.h), element i of a fill drawing the
// hash of (seed, offset + i), and each fill advances the offset past the
// counters it used. DTensor's RNG tracker (OffsetBasedRNGTracker) reads and
// writes exactly this state through get_rng_state / set_rng_state (16 bytes:
// seed, then offset) to give replicas identical values and each shard its
// part of the one global tensor. Kernels that take a seed only (randperm,
// multinomial, attention dropout) and CPU fallback kernels get a key hashed
// from (seed, offset) and advance the offset by one step, so everything
// random on neuron is reproducible from the state.
#pragma once

#include <ATen/core/Generator.h>

#include <optional>

namespace neuron {

struct NeuronGeneratorImpl final : public c10::GeneratorImpl {
    explicit NeuronGeneratorImpl(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val);

    void set_current_seed(uint64_t seed) override;
    void set_offset(uint64_t offset) override;
    uint64_t get_offset() const override;
    uint64_t current_seed() const override;
    uint64_t seed() override;
    void set_state(const c10::TensorImpl &new_state) override;
    c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
    static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

private:
    NeuronGeneratorImpl *clone_impl() const override;
    uint64_t seed_;
    uint64_t offset_ = 0;
};

// Default generator of a device (created on first use, lives forever).
const at::Generator &default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

// Counters [offset, offset + count) of `gen` (the device's default
// generator when none is given), now used: a kernel's (seed, offset). The
// offset advances by `count` rounded up to a multiple of 4, the step
// DTensor's tracker assumes, so a sharded fill and a plain one advance alike.
struct CounterRange {
    uint64_t seed;
    uint64_t offset;
};
CounterRange reserve_counters(const std::optional<at::Generator> &gen, c10::DeviceIndex index,
                              uint64_t count);

// One key hashed from the next (seed, offset), for kernels that take a seed
// only.
uint64_t draw_key(const std::optional<at::Generator> &gen, c10::DeviceIndex index);

// A fresh CPU generator seeded with draw_key(gen): what a CPU fallback
// kernel draws from on a neuron generator's behalf.
at::Generator fallback_cpu_generator(const at::Generator &gen);

}  // namespace neuron
