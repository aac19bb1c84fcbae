// runtime/device.h - shared helpers of the C++ layer: device indices, streams
// and dtypes translated between c10 and libtrn.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <optional>

#include "runtime/trn_check.h"

namespace neuron {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// Throws a clear error for an index outside [0, device_count).
void check_device(c10::DeviceIndex index);
// Index of `device` (the current device when it has none), checked.
c10::DeviceIndex device_index(const c10::Device &device);
c10::DeviceIndex current_device();

trn_stream *to_trn_stream(const c10::Stream &stream);
c10::Stream to_c10_stream(trn_stream *stream);
trn_stream *current_trn_stream(c10::DeviceIndex index);

// libtrn dtype for a scalar type the device stores and converts natively
// (the float8 types included); nullopt for any other type.
std::optional<trn_dtype> native_dtype(c10::ScalarType type);
// Whether tensors of this type may live on the device at all (today: the
// native dtypes).
bool is_storable(c10::ScalarType type);
// Throws TypeError naming the dtype when it cannot live on the device.
void check_storable(c10::ScalarType type);
// A native dtype of the same element size, for byte-exact same-type copies.
trn_dtype bytewise_dtype(c10::ScalarType type);

}  // namespace neuron
