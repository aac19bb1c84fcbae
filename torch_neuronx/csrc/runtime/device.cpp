// runtime/device.cpp - device index checks, stream and dtype translation.
#include "runtime/device.h"

namespace neuron {

void check_device(c10::DeviceIndex index) { TRN_CHECK(trn_device_check(index)); }

c10::DeviceIndex current_device() {
    return static_cast<c10::DeviceIndex>(trn_device_get_current());
}

c10::DeviceIndex device_index(const c10::Device &device) {
    TORCH_CHECK(device.type() == kNeuron, "expected a neuron device, got ", device);
    c10::DeviceIndex index = device.has_index() ? device.index() : current_device();
    check_device(index);
    return index;
}

trn_stream *to_trn_stream(const c10::Stream &stream) {
    trn_stream *s = nullptr;
    TRN_CHECK(trn_stream_from_id(stream.device_index(), stream.id(), &s));
    return s;
}

c10::Stream to_c10_stream(trn_stream *stream) {
    return c10::Stream(
        c10::Stream::UNSAFE,
        c10::Device(kNeuron, static_cast<c10::DeviceIndex>(trn_stream_device(stream))),
        trn_stream_id(stream));
}

trn_stream *current_trn_stream(c10::DeviceIndex index) {
    trn_stream *s = nullptr;
    TRN_CHECK(trn_stream_get_current(index, &s));
    return s;
}

bool is_storable(c10::ScalarType type) { return native_dtype(type).has_value(); }

void check_storable(c10::ScalarType type) {
    TORCH_CHECK_TYPE(is_storable(type), "neuron does not support dtype ", type,
                     ": supported are bool, (u)int8-64, float16, bfloat16, "
                     "float32, float64, complex64, complex128 and the float8 "
                     "types");
}

trn_dtype bytewise_dtype(c10::ScalarType type) {
    switch (c10::elementSize(type)) {
    case 1: return TRN_DTYPE_U8;
    case 2: return TRN_DTYPE_U16;
    case 4: return TRN_DTYPE_U32;
    case 8: return TRN_DTYPE_U64;
    case 16: return TRN_DTYPE_C128;
    default: TORCH_CHECK_TYPE(false, "neuron cannot copy dtype ", type);
    }
}

}  // namespace neuron
