// runtime/device.h - shared helpers of the C++ layer: device indices, streams
// and dtypes translated between c10 and libtrn.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <array>
#include <cstdint>
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

namespace detail {
constexpr int native_dtype_code(c10::ScalarType type) {
    using c10::ScalarType;
    switch (type) {
    case ScalarType::Bool: return TRN_DTYPE_BOOL;
    case ScalarType::Byte: return TRN_DTYPE_U8;
    case ScalarType::Char: return TRN_DTYPE_I8;
    case ScalarType::Short: return TRN_DTYPE_I16;
    case ScalarType::Int: return TRN_DTYPE_I32;
    case ScalarType::Long: return TRN_DTYPE_I64;
    case ScalarType::UInt16: return TRN_DTYPE_U16;
    case ScalarType::UInt32: return TRN_DTYPE_U32;
    case ScalarType::UInt64: return TRN_DTYPE_U64;
    case ScalarType::Half: return TRN_DTYPE_F16;
    case ScalarType::BFloat16: return TRN_DTYPE_BF16;
    case ScalarType::Float: return TRN_DTYPE_F32;
    case ScalarType::Double: return TRN_DTYPE_F64;
    case ScalarType::ComplexFloat: return TRN_DTYPE_C64;
    case ScalarType::ComplexDouble: return TRN_DTYPE_C128;
    case ScalarType::Float8_e4m3fn: return TRN_DTYPE_F8E4M3FN;
    case ScalarType::Float8_e5m2: return TRN_DTYPE_F8E5M2;
    case ScalarType::Float8_e4m3fnuz: return TRN_DTYPE_F8E4M3FNUZ;
    case ScalarType::Float8_e5m2fnuz: return TRN_DTYPE_F8E5M2FNUZ;
    case ScalarType::Float8_e8m0fnu: return TRN_DTYPE_F8E8M0FNU;
    default: return -1;
    }
}

// Built at compile time: no static-initialisation order, no guard.
inline constexpr auto native_dtype_table = [] {
    std::array<int8_t, static_cast<size_t>(c10::ScalarType::NumOptions)> m{};
    for (size_t i = 0; i < m.size(); i++)
        m[i] = static_cast<int8_t>(native_dtype_code(static_cast<c10::ScalarType>(i)));
    return m;
}();
static_assert(TRN_DTYPE_COUNT <= 127, "native_dtype_table holds a trn_dtype in an int8_t");
}  // namespace detail

// libtrn dtype for a scalar type the device stores and converts natively
// (the float8 types included); nullopt for any other type. Inline table
// lookup: the launch path asks ~10 times per op, and an out-of-line switch
// was ~2.5 % of a small op's time.
inline std::optional<trn_dtype> native_dtype(c10::ScalarType type) {
    const auto i = static_cast<size_t>(type);
    if (i >= detail::native_dtype_table.size() || detail::native_dtype_table[i] < 0)
        return std::nullopt;
    return static_cast<trn_dtype>(detail::native_dtype_table[i]);
}
// Whether tensors of this type may live on the device at all (today: the
// native dtypes).
bool is_storable(c10::ScalarType type);
// Throws TypeError naming the dtype when it cannot live on the device.
void check_storable(c10::ScalarType type);
// A native dtype of the same element size, for byte-exact same-type copies.
trn_dtype bytewise_dtype(c10::ScalarType type);

}  // namespace neuron
