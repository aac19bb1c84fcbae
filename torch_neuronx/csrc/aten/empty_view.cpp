// aten/empty_view.cpp - the kernels that create, view and reshape neuron
// tensors: allocation, views, resize_ and the set_ overloads. They only move
// metadata and memory; compute lives in libtrn.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/direct_iter.h"
#include "runtime/device.h"

namespace neuron {

at::Allocator *device_allocator();

// Grows the tensor's storage when the new geometry needs more bytes, keeping
// the old contents (storage stays shared with other views, as on CPU).
at::Tensor &resize_neuron_(at::Tensor &self, at::IntArrayRef size,
                           std::optional<at::IntArrayRef> stride) {
    for (int64_t s : size)
        TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
    c10::TensorImpl *impl = self.unsafeGetTensorImpl();
    // As ATen's resize_impl_cpu_: the same sizes (and strides, if given)
    // leave the tensor as it is (an expanded out= stays expanded, and is
    // then refused by the overlap checks, as on CPU).
    if (self.sizes() == size && (!stride || self.strides() == *stride)) return self;
    if (stride)
        impl->set_sizes_and_strides(size, *stride);
    else
        impl->set_sizes_contiguous(size);
    if (impl->numel() == 0) return self;
    const size_t itemsize = self.dtype().itemsize();
    const size_t offset = static_cast<size_t>(impl->storage_offset());
    size_t needed = stride ? at::detail::computeStorageNbytes(size, *stride, itemsize, offset)
                           : at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
    const c10::Storage &storage = impl->unsafe_storage();
    if (needed > storage.nbytes())
        at::native::resize_bytes_nocuda(storage, static_cast<int64_t>(needed));
    return self;
}

namespace {

// The checks every factory kernel makes: a valid device, a dense strided
// layout, no pinning, a storable dtype. Returns the device index and dtype.
std::pair<c10::DeviceIndex, at::ScalarType> check_factory_args(std::optional<at::ScalarType> dtype,
                                                               std::optional<at::Layout> layout,
                                                               std::optional<at::Device> device,
                                                               std::optional<bool> pin_memory) {
    c10::DeviceIndex index = device_index(device.value_or(c10::Device(kNeuron)));
    TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
    TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
                "neuron supports only strided tensors, got layout ", *layout);
    at::ScalarType type = dtype.value_or(c10::get_default_dtype_as_scalartype());
    check_storable(type);
    return {index, type};
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
    auto [index, type] = check_factory_args(dtype, layout, device, pin_memory);
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    return at::detail::empty_generic(size, device_allocator(),
                                     c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type,
                                     memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
    auto [index, type] = check_factory_args(dtype, layout, device, pin_memory);
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    return at::detail::empty_strided_generic(
        size, stride, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type);
}

}  // namespace

at::Tensor empty_for_iter(at::IntArrayRef sizes, at::IntArrayRef strides,
                          const at::TensorOptions &options) {
    if (strides.empty())
        return empty_memory_format(sizes, options.dtype().toScalarType(), at::kStrided,
                                   options.device(), std::nullopt, options.memory_format_opt());
    return empty_strided(sizes, strides, options.dtype().toScalarType(), at::kStrided,
                         options.device(), std::nullopt);
}

namespace {

const at::Tensor &resize_(const at::Tensor &self, at::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
    at::Tensor t = self;
    c10::DeviceGuard guard(self.device());
    resize_neuron_(t, size, std::nullopt);
    if (memory_format && *memory_format != at::MemoryFormat::Contiguous) {
        TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "unsupported memory format ",
                    *memory_format);
        t.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
    }
    return self;
}

at::Tensor &set_storage(at::Tensor &self, at::Storage source, int64_t offset, at::IntArrayRef size,
                        at::IntArrayRef stride) {
    at::native::checkSetStorage(self, source, offset, size, stride);
    self.unsafeGetTensorImpl()->set_storage_offset(offset);
    std::optional<at::IntArrayRef> st;
    if (stride.data() != nullptr) st = stride;
    c10::DeviceGuard guard(self.device());
    return resize_neuron_(self, size, st);
}

at::Tensor &set_storage_whole(at::Tensor &self, at::Storage source) {
    int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
    return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor &set_tensor(at::Tensor &self, const at::Tensor &source) {
    if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
    return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                       source.strides());
}

at::Tensor &set_empty(at::Tensor &self) {
    c10::DeviceGuard guard(self.device());
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
    return set_storage(self, std::move(storage), 0, {0}, {});
}

void record_stream(at::Tensor &self, c10::Stream stream) {
    TORCH_CHECK(stream.device_type() == kNeuron, "record_stream needs a neuron stream, got ",
                stream);
    const c10::DataPtr &data = self.storage().data_ptr();
    if (data.get() != nullptr) TRN_CHECK(trn_mem_record_stream(data.get(), to_trn_stream(stream)));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
    m.impl("empty_strided", TORCH_FN(empty_strided));
    m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    m.impl("view", TORCH_FN(at::native::view));
    m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    m.impl("unfold", TORCH_FN(at::native::unfold));
    m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
    m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
    m.impl("resize_", TORCH_FN(resize_));
    m.impl("set_.source_Storage", TORCH_FN(set_storage_whole));
    m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
    m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
    m.impl("set_", TORCH_FN(set_empty));
    m.impl("record_stream", TORCH_FN(record_stream));
}

}  // namespace
}  // namespace neuron
