// aten/select.cpp - order statistics on neuron: kthvalue, median and
// nanmedian (whole tensor and along a dim, functional and out= forms), run
// by libtrn's quickselect kernel (trn/select.h). The reduced dim is moved
// last and made contiguous; results take keepdim's shape. Argument checks
// and messages follow PyTorch CPU; dtypes the kernel does not cover go to
// the CPU fallback. Autograd is PyTorch's (value_selecting_reduction_backward
// / evenly_distribute_backward, composed of native ops).
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "aten/meta.h"
#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/select.h"

namespace neuron {
namespace {

using at::Tensor;

bool native_ok(const Tensor &t) {
    auto dt = native_dtype(t.scalar_type());
    return dt && trn_select_supports(*dt);
}

trn_stream *stream_of(const Tensor &t) { return current_trn_stream(t.device().index()); }

// Runs the kernel over the rows of `x` ([rows, n] contiguous).
void launch(const Tensor &x, int64_t rows, int64_t n, trn_select_mode mode, int64_t k,
            Tensor &values, Tensor *indices) {
    trn_select_desc d{};
    d.dtype = *native_dtype(x.scalar_type());
    d.mode = mode;
    d.rows = rows;
    d.n = n;
    d.k = k;
    d.x = x.data_ptr();
    d.values = values.data_ptr();
    d.indices = indices ? indices->data_ptr<int64_t>() : nullptr;
    TRN_CHECK(trn_select_launch(stream_of(x), &d));
}

// Along `dim` (wrapped, non-empty unless the tensor is 0-d): values and
// indices with keepdim's shape.
std::tuple<Tensor, Tensor> select_dim(const Tensor &self, int64_t dim, bool keepdim,
                                      trn_select_mode mode, int64_t k) {
    const int64_t n = self.dim() > 0 ? self.size(dim) : 1;
    std::vector<int64_t> kept = self.sizes().vec();
    if (self.dim() > 0) kept[dim] = 1;
    Tensor values = at::empty(kept, self.options());
    Tensor indices = at::empty(kept, self.options().dtype(at::kLong));
    if (values.numel() > 0) {
        const Tensor x = (self.dim() > 0 ? self.movedim(dim, -1) : self.reshape({1})).contiguous();
        const int64_t rows = values.numel();
        launch(x, rows, n, mode, k, values, &indices);
    }
    if (!keepdim && self.dim() > 0) {
        values = values.squeeze(dim);
        indices = indices.squeeze(dim);
    }
    return {values, indices};
}

std::tuple<Tensor, Tensor> kth_select(const Tensor &self, int64_t k, int64_t dim, bool keepdim) {
    if (!native_ok(self)) return fallback<at::_ops::kthvalue>(self, k, dim, keepdim);
    const int64_t wd = at::maybe_wrap_dim(dim, self.dim());
    const int64_t n = self.dim() > 0 ? self.size(wd) : 1;
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(wd) != 0, "kthvalue(): Expected reduction dim ",
                      wd, " to have non-zero size.");
    TORCH_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", wd);
    auto r = select_dim(self, wd, keepdim, TRN_SELECT_KTH, k - 1);
    tracking::record_executed("aten::kthvalue");
    return r;
}

std::tuple<Tensor, Tensor> median_dim_impl(const char *name, const Tensor &self, int64_t dim,
                                           bool keepdim, trn_select_mode mode) {
    const int64_t wd = at::maybe_wrap_dim(dim, self.dim());
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(wd) != 0, name, "(): Expected reduction dim ",
                      wd, " to have non-zero size.");
    return select_dim(self, wd, keepdim, mode, 0);
}

std::tuple<Tensor, Tensor> median_dim(const Tensor &self, int64_t dim, bool keepdim) {
    if (!native_ok(self)) return fallback<at::_ops::median_dim>(self, dim, keepdim);
    auto r = median_dim_impl("median", self, dim, keepdim, TRN_SELECT_MEDIAN);
    tracking::record_executed("aten::median.dim");
    return r;
}

std::tuple<Tensor, Tensor> nanmedian_dim(const Tensor &self, int64_t dim, bool keepdim) {
    if (!native_ok(self)) return fallback<at::_ops::nanmedian_dim>(self, dim, keepdim);
    auto r = median_dim_impl("nanmedian", self, dim, keepdim, TRN_SELECT_NANMEDIAN);
    tracking::record_executed("aten::nanmedian.dim");
    return r;
}

// Whole tensor: a 0-d value; an empty input gives NaN (cast to the dtype,
// as CPU).
Tensor median_all_impl(const Tensor &self, trn_select_mode mode) {
    if (self.numel() == 0)
        return at::full({}, NAN, self.options().device(at::kCPU)).to(self.device());
    Tensor values = at::empty({}, self.options());
    const Tensor x = self.contiguous();
    launch(x, 1, self.numel(), mode, 0, values, nullptr);
    return values;
}

Tensor median_all(const Tensor &self) {
    if (!native_ok(self)) return fallback<at::_ops::median>(self);
    Tensor r = median_all_impl(self, TRN_SELECT_MEDIAN);
    tracking::record_executed("aten::median");
    return r;
}

Tensor nanmedian_all(const Tensor &self) {
    if (!native_ok(self)) return fallback<at::_ops::nanmedian>(self);
    Tensor r = median_all_impl(self, TRN_SELECT_NANMEDIAN);
    tracking::record_executed("aten::nanmedian");
    return r;
}

// out= forms: computed functionally, then written into the given tensors
// (so an out that is the input's memory reads nothing it has overwritten).
// The checks are CPU's: kthvalue's (_reduction_with_indices_allocate_or_
// resize_output: same dtype and device as self, no overlap with self at
// all) and median's (checkSameType, TensorIterator's overlap rule).
void check_kthvalue_out(const Tensor &self, const Tensor &values, const Tensor &indices) {
    check_out_device(values, self.device());  // CPU words it as a type mismatch
    at::assert_no_overlap(self, values);
    TORCH_CHECK(self.options().type_equal(values.options()),
                "output values must be of same type as input");
    TORCH_CHECK(indices.scalar_type() == at::kLong, "output indices must be of scalar type Long");
    TORCH_CHECK(indices.device() == self.device(),
                "output indices must be on same device as input");
    check_out_overlap(values, self);
    check_out_overlap(indices, self);
}

void check_median_out(const char *name, const Tensor &self, const Tensor &values,
                      const Tensor &indices) {
    check_out_device(values, self.device());
    check_out_device(indices, self.device());
    at::checkScalarType(name, {indices, "indices", 1}, at::kLong);
    at::checkSameType(name, {values, "values", 0}, {self, "self", 2});
    check_out_overlap(values, self);
    check_out_overlap(indices, self);
}

std::tuple<Tensor &, Tensor &> write_out(const std::tuple<Tensor, Tensor> &r, Tensor &values,
                                         Tensor &indices) {
    at::native::resize_output(values, std::get<0>(r).sizes());
    at::native::resize_output(indices, std::get<1>(r).sizes());
    values.copy_(std::get<0>(r));
    indices.copy_(std::get<1>(r));
    return {values, indices};
}

std::tuple<Tensor &, Tensor &> kthvalue_out(const Tensor &self, int64_t k, int64_t dim,
                                            bool keepdim, Tensor &values, Tensor &indices) {
    if (!native_ok(self))
        return fallback<at::_ops::kthvalue_values>(self, k, dim, keepdim, values, indices);
    check_kthvalue_out(self, values, indices);
    return write_out(kth_select(self, k, dim, keepdim), values, indices);
}

std::tuple<Tensor &, Tensor &> median_out(const Tensor &self, int64_t dim, bool keepdim,
                                          Tensor &values, Tensor &indices) {
    if (!native_ok(self))
        return fallback<at::_ops::median_dim_values>(self, dim, keepdim, values, indices);
    check_median_out("median", self, values, indices);
    return write_out(median_dim(self, dim, keepdim), values, indices);
}

std::tuple<Tensor &, Tensor &> nanmedian_out(const Tensor &self, int64_t dim, bool keepdim,
                                             Tensor &values, Tensor &indices) {
    if (!native_ok(self))
        return fallback<at::_ops::nanmedian_dim_values>(self, dim, keepdim, values, indices);
    check_median_out("nanmedian", self, values, indices);
    return write_out(nanmedian_dim(self, dim, keepdim), values, indices);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("kthvalue", TORCH_FN(kth_select));
    m.impl("kthvalue.values", TORCH_FN(kthvalue_out));
    m.impl("median", TORCH_FN(median_all));
    m.impl("median.dim", TORCH_FN(median_dim));
    m.impl("median.dim_values", TORCH_FN(median_out));
    m.impl("nanmedian", TORCH_FN(nanmedian_all));
    m.impl("nanmedian.dim", TORCH_FN(nanmedian_dim));
    m.impl("nanmedian.dim_values", TORCH_FN(nanmedian_out));
}

}  // namespace
}  // namespace neuron
