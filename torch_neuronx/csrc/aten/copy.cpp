// aten/copy.cpp - _copy_from, _copy_from_and_resize and _local_scalar_dense:
// every byte that enters or leaves the device goes through libtrn's copy
// kernel on a stream.
//
// Ordering rules: device-local copies are asynchronous on the device's
// current stream. A copy that touches host memory synchronizes before
// returning (the host buffer may be pageable and reused at once), and so does
// a copy between two devices (the source block may be recycled on its own
// stream). non_blocking is accepted and, for now, does not change that.
#include <ATen/MemoryOverlap.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <utility>

#include "aten/eager_group.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {

at::Tensor &resize_neuron_(at::Tensor &self, at::IntArrayRef size,
                           std::optional<at::IntArrayRef> stride);

namespace {

bool on_neuron(const at::Tensor &t) { return t.device().type() == kNeuron; }

// The libtrn dtypes of a dst <- src copy: one dtype read bytewise when both
// agree, else both converted natively. Throws NotImplementedError when libtrn
// has no native conversion between the two (the one place that decides it).
std::pair<trn_dtype, trn_dtype> copy_dtypes(at::ScalarType dst, at::ScalarType src) {
    if (dst == src) {
        auto n = native_dtype(dst);
        const trn_dtype d = n ? *n : bytewise_dtype(dst);
        return {d, d};
    }
    auto nd = native_dtype(dst), ns = native_dtype(src);
    TORCH_CHECK_NOT_IMPLEMENTED(nd && ns, "no native conversion from ", src, " to ", dst);
    return {*nd, *ns};
}

// dst <- src (broadcast to dst's shape), element by element, ignoring the
// conj/neg view bits of both. Throws NotImplementedError when libtrn has no
// native conversion between the two dtypes.
void launch_copy(trn_stream *stream, const at::Tensor &dst, const at::Tensor &src) {
    if (dst.numel() == 0) return;
    const auto [dd, sd] = copy_dtypes(dst.scalar_type(), src.scalar_type());
    auto geometry = at::inferExpandGeometry_dimvector(src.sizes(), src.strides(), dst.sizes());
    TORCH_CHECK(dst.dim() <= TRN_MAX_DIMS, "neuron copies support at most ", TRN_MAX_DIMS,
                " dimensions, got ", dst.dim());
    trn_copy_desc desc{};
    desc.ndim = static_cast<int>(dst.dim());
    desc.sizes = dst.sizes().data();
    desc.dst = dst.data_ptr();
    desc.dst_strides = dst.strides().data();
    desc.dst_dtype = dd;
    desc.src = src.const_data_ptr();
    desc.src_strides = geometry.strides.data();
    desc.src_dtype = sd;
    TRN_CHECK(trn_copy_launch(stream, &desc));
}

trn_stream *stream_for(const at::Tensor &src, const at::Tensor &dst) {
    return current_trn_stream(on_neuron(dst) ? dst.device().index() : src.device().index());
}

// What copy_native cannot do (conj/neg view bits, a dtype pair libtrn does
// not convert) throws NotImplementedError here, before anything runs.
void check_native_copy(const at::Tensor &src, const at::Tensor &dst) {
    TORCH_CHECK_NOT_IMPLEMENTED(!src.is_conj() && !src.is_neg() && !dst.is_conj() && !dst.is_neg(),
                                "conjugate or negative views");
    (void)copy_dtypes(dst.scalar_type(), src.scalar_type());
}

void copy_native(const at::Tensor &src, const at::Tensor &dst) {
    if (on_neuron(src) && on_neuron(dst) && src.device() != dst.device()) {
        TRN_CHECK(trn_stream_synchronize(current_trn_stream(src.device().index())));
        trn_stream *s = current_trn_stream(dst.device().index());
        launch_copy(s, dst, src);
        TRN_CHECK(trn_stream_synchronize(s));
        return;
    }
    trn_stream *s = stream_for(src, dst);
    // A device copy may join the open fused group (a cast node); a copy to
    // the host reads values: it ends the group as a host read.
    if (on_neuron(src) && on_neuron(dst) && eager_group::offer_copy(s, dst, src)) return;
    eager_group::EndHint hint(on_neuron(dst) ? eager_group::End::Op : eager_group::End::HostRead);
    launch_copy(s, dst, src);
    if (!on_neuron(src) || !on_neuron(dst)) TRN_CHECK(trn_stream_synchronize(s));
}

// The CPU route: stored values to the host, conversion and conj/neg bits
// resolved by PyTorch CPU, values to store back. Only what libtrn lacks
// (conj/neg view bits) comes here.
at::Tensor stored_values_on_host(const at::Tensor &src) {
    if (!on_neuron(src)) {
        at::Tensor raw = src.is_conj() ? src.conj() : src;  // clears the bit
        return raw.is_neg() ? raw._neg_view() : raw;
    }
    at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
    trn_stream *s = current_trn_stream(src.device().index());
    launch_copy(s, host, src);
    TRN_CHECK(trn_stream_synchronize(s));
    return host;
}

void copy_through_cpu(const at::Tensor &src, const at::Tensor &dst) {
    at::Tensor values = stored_values_on_host(src);
    if (src.is_conj()) values = values.conj_physical();
    if (src.is_neg()) values = values.neg();
    values = values.to(dst.scalar_type());
    if (dst.is_conj()) values = values.conj_physical();
    if (dst.is_neg()) values = values.neg();
    trn_stream *s = stream_for(src, dst);
    launch_copy(s, dst, values.contiguous());
    TRN_CHECK(trn_stream_synchronize(s));
}

at::Tensor copy_from(const at::Tensor &self, const at::Tensor &dst, bool non_blocking) {
    (void)non_blocking;
    TORCH_CHECK(self.defined() && dst.defined(), "copy needs defined tensors");
    if (dst.numel() == 0 || dst.is_same(self)) return dst;
    // As CPU's copy_ (TensorIterator's overlap check): a destination whose
    // elements share memory (an expanded view) cannot be written.
    at::assert_no_internal_overlap(dst);
    // And, as CPU's copy_, a source that partially overlaps it (one element
    // apart in one buffer) is refused: the result would depend on the order
    // the elements are copied in.
    if (on_neuron(self) && on_neuron(dst)) at::assert_no_partial_overlap(dst, self);
    try {
        check_native_copy(self, dst);
    } catch (const c10::NotImplementedError &e) {
        tracking::native_failed("aten::_copy_from", e);
        copy_through_cpu(self, dst);
        return dst;
    }
    // Outside the try: an error here (this copy's, or an earlier kernel's
    // surfacing at the synchronize) is the user's, never a reason to copy a
    // buffer through the CPU that the failed kernel did not write.
    copy_native(self, dst);
    tracking::record_executed("aten::_copy_from");
    return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst) {
    at::Tensor out = dst;
    if (out.sizes() != self.sizes()) resize_neuron_(out, self.sizes(), std::nullopt);
    return copy_from(self, out, false);
}

c10::Scalar local_scalar_dense(const at::Tensor &self) {
    TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
                " elements cannot be converted to Scalar");
    at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
    trn_stream *s = current_trn_stream(self.device().index());
    eager_group::EndHint hint(eager_group::End::HostRead);
    launch_copy(s, host, self.reshape({}));
    TRN_CHECK(trn_stream_synchronize(s));
    tracking::record_executed("aten::_local_scalar_dense");
    if (self.is_conj()) host = host.conj_physical();
    if (self.is_neg()) host = host.neg();
    return host.item();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_copy_from", TORCH_FN(copy_from));
    m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
    m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

// PyTorch's conjugate/negative-view fallbacks would resolve a conj source by
// cloning it, and the clone copies through _copy_from again: infinite
// recursion. Let the bits through; copy_from resolves them itself.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace
}  // namespace neuron
