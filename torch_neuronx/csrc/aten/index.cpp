// aten/index.cpp - indexing and data-movement ops on neuron (index,
// index_put, index_select, gather, scatter*, index_add, index_copy, masked_fill,
// masked_select, nonzero, cat, slice_backward, embedding and its dense backward), run by libtrn's
// trn/index.h kernels. PyTorch's own helpers decide shapes and layouts
// (expandTensors / the AdvancedIndex restriding, the scatter/gather shape
// checks, TensorIterator for broadcasting and dimension coalescing); this
// file turns the result into a launch descriptor.
//
// Index errors: kernels check every index and fail their task; ops that
// check indices synchronize after the launch so the error is raised at the
// call, with the exception type PyTorch CPU raises (IndexError for
// index/index_put/index_select(dim 0), RuntimeError otherwise). The embedding
// backward skips that wait for indices its forward checked (index_checked.h).
// Dtypes libtrn cannot handle (or shapes beyond TRN_INDEX_MAX_*) fall back
// to the CPU.
#include <ATen/Dispatch_v2.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ScatterGatherChecks.h>
#include <ATen/ops/embedding_native.h>
#include <ATen/native/TensorAdvancedIndexingUtils.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/scatter_reduce_meta.h>
#include <torch/library.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "aten/index_checked.h"
#include "aten/meta.h"
#include "observe/op_tracking.h"
#include "trn/slice_backward.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;

trn_stream *stream_of(const at::TensorBase &t) { return current_trn_stream(t.device().index()); }

bool native(at::ScalarType t) { return native_dtype(t).has_value(); }

enum class Err { Index, Runtime, IndexSelect0, IndexSelectN, IndexCopy };

// An index-checking kernel's status: an index error becomes the exception
// PyTorch CPU raises for the op. The status is the synchronize's after the
// launch, or the launch's own under NEURON_LAUNCH_BLOCKING=1 (the launch
// waits for its kernel and returns its error).
void raise_checked(trn_status st, Err kind) {
    if (st == TRN_SUCCESS) return;
    if (st != TRN_ERROR_INVALID_ARGUMENT) TRN_CHECK(st);
    std::string msg = trn_last_error();
    trn_clear_error();
    long long v = 0, size = 0;
    int dim = 0;
    std::sscanf(msg.c_str(), "index %lld is out of bounds for dimension %d with size %lld", &v,
                &dim, &size);
    switch (kind) {
    case Err::Index: TORCH_CHECK_INDEX(false, msg);
    case Err::IndexSelect0: TORCH_CHECK_INDEX(false, "index out of range in self");
    case Err::IndexSelectN:
        TORCH_CHECK(false, "INDICES element is out of DATA bounds, id=", v, " axis_dim=", size);
    case Err::IndexCopy:
        TORCH_CHECK_INDEX(false, "index_copy_(): index ", v, " is out of bounds for dimension ",
                          dim, " with size ", size);
    default: TORCH_CHECK(false, msg);
    }
}

// Synchronizes after an index-checking launch (raise_checked).
void sync_checked(trn_stream *s, Err kind) { raise_checked(trn_stream_synchronize(s), kind); }

// One element of `type` holding `v`, for scalar sources.
void scalar_bytes(const Scalar &v, at::ScalarType type, unsigned char out[16]) {
    std::memset(out, 0, 16);
    AT_DISPATCH_V2(type, "neuron_scalar_bytes", AT_WRAP([&] {
                       scalar_t x = v.to<scalar_t>();
                       std::memcpy(out, &x, sizeof x);
                   }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16,
                   AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
}

// Descriptor from a built iterator: operand 0 = direct side of the output
// (or the destination), `src_op` = the source operand (-1: scalar value),
// operands from `first_idx` on = index tensors.
struct IndexLaunch {
    int scatter = 0;
    trn_index_reduce reduce = TRN_INDEX_REDUCE_NONE;
    int include_self = 1;
    int wrap = 0;
    double alpha = 1.0;
    int64_t alpha_int = 1;
    int64_t out_numel = 0;
    unsigned char value[16] = {0};
    std::vector<int64_t> indexed_sizes, indexed_strides;
    std::vector<int> dims;
};

bool fits(const at::TensorIteratorBase &iter, size_t nidx) {
    return iter.ndim() <= TRN_INDEX_MAX_DIMS && nidx <= TRN_INDEX_MAX_INDICES;
}

// `checked`: the op checks indices (its error as raise_checked makes it).
void launch_iter(at::TensorIteratorBase &iter, at::ScalarType type, int src_op, int first_idx,
                 const IndexLaunch &l, std::optional<Err> checked = std::nullopt) {
    if (iter.numel() == 0) return;
    trn_index_desc d{};
    d.scatter = l.scatter;
    d.reduce = l.reduce;
    d.include_self = l.include_self;
    d.dtype = *native_dtype(type);
    d.ndim = static_cast<int>(iter.ndim());
    d.sizes = iter.shape().data();
    d.out = iter.data_ptr(0);
    d.out_strides = iter.strides(0).data();
    if (src_op >= 0) {
        d.src = iter.data_ptr(src_op);
        d.src_strides = iter.strides(src_op).data();
    }
    std::memcpy(d.value, l.value, 16);
    d.alpha = l.alpha;
    d.alpha_int = l.alpha_int;
    d.nidx = static_cast<int>(l.indexed_sizes.size());
    for (int k = 0; k < d.nidx; ++k) {
        d.idx[k] = static_cast<const int64_t *>(iter.data_ptr(first_idx + k));
        d.idx_strides[k] = iter.strides(first_idx + k).data();
        d.indexed_sizes[k] = l.indexed_sizes[k];
        d.indexed_strides[k] = l.indexed_strides[k];
        d.dims[k] = l.dims[k];
    }
    d.wrap = l.wrap;
    d.out_numel = l.out_numel;
    const trn_status st = trn_index_launch(stream_of(iter.tensor_base(0)), &d);
    if (checked) raise_checked(st, *checked);
    TRN_CHECK(st);
}

Tensor as_long(const Tensor &index) {
    return index.scalar_type() == at::kLong ? index : index.to(at::kLong);
}

// `t` viewed with `shape` and its own strides except stride[dim] = 0 (the
// dimension the index walks).
Tensor restride_dim(const Tensor &t, int64_t dim, at::IntArrayRef shape) {
    std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
    if (strides.empty()) strides.push_back(1);
    strides[dim] = 0;
    return t.as_strided(shape, strides);
}

// ---------------------------------------------------------------------------
// advanced indexing: PyTorch's AdvancedIndex, rebuilt here (its constructor
// is not exported) from the same header helpers.
// ---------------------------------------------------------------------------
struct Info {
    Tensor src;
    std::vector<Tensor> indices;
    std::vector<int64_t> indexed_sizes, indexed_strides;
    std::vector<int> dims;
};

Info make_info(Tensor self, const c10::List<std::optional<Tensor>> &orig) {
    using namespace at::native;
    checkIndexTensorTypes(orig, /*allow_int=*/true);
    std::vector<Tensor> indices = expandTensors(self, orig, /*ensure_same_device=*/true);
    try {
        indices = at::expand_outplace(indices);
    } catch (std::exception &) {
        TORCH_CHECK_INDEX(false,
                          "shape mismatch: indexing tensors could not be broadcast together");
    }
    while (indices.size() < static_cast<size_t>(self.dim())) indices.emplace_back();
    if (!hasContiguousSubspace(indices)) std::tie(self, indices) = transposeToFront(self, indices);
    Info info;
    const int64_t es = self.element_size();
    int64_t before = 0, after = 0, indexed = 0;
    at::IntArrayRef replacement;
    for (size_t dim = 0; dim < indices.size(); ++dim) {
        if (!indices[dim].defined()) {
            (indexed == 0 ? before : after)++;
        } else {
            indexed++;
            replacement = indices[dim].sizes();
            info.indexed_sizes.push_back(self.size(dim));
            info.indexed_strides.push_back(self.stride(dim) * es);
            info.dims.push_back(static_cast<int>(info.dims.size()));
        }
    }
    if (std::find(info.indexed_sizes.begin(), info.indexed_sizes.end(), 0) !=
            info.indexed_sizes.end() &&
        std::find(replacement.begin(), replacement.end(), 0) == replacement.end())
        TORCH_CHECK_INDEX(false, "index is out of bounds for dimension with size 0");
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    std::vector<int64_t> strides(self.strides().begin(), self.strides().end());
    shape.erase(shape.begin() + before, shape.begin() + before + indexed);
    strides.erase(strides.begin() + before, strides.begin() + before + indexed);
    shape.insert(shape.begin() + before, replacement.begin(), replacement.end());
    strides.insert(strides.begin() + before, replacement.size(), 0);
    info.src = self.as_strided(shape, strides);
    for (auto &index : indices) {
        if (!index.defined()) continue;
        std::vector<int64_t> ishape(before, 1);
        ishape.insert(ishape.end(), index.sizes().begin(), index.sizes().end());
        ishape.insert(ishape.end(), after, 1);
        info.indices.push_back(as_long(index).reshape(ishape));
    }
    return info;
}

Tensor &index_out(const Tensor &self, const c10::List<std::optional<Tensor>> &indices,
                  Tensor &out) {
    TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()),
                      "too many indices for tensor of dimension ", self.dim(), " (got ",
                      indices.size(), ")");
    TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_out: self (", self.scalar_type(),
                ") and result (", out.scalar_type(), ") must have the same scalar type");
    if (!native(self.scalar_type()))
        return fallback<at::_ops::index_Tensor_out>(self, indices, out);
    Info info = make_info(self, indices);
    at::native::resize_output(out, info.src.sizes());
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self);
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(false).check_all_same_dtype(false).add_output(out).add_const_input(
        info.src);
    for (auto &i : info.indices) config.add_const_input(i);
    auto iter = config.build();
    if (!fits(iter, info.indices.size()))
        return fallback<at::_ops::index_Tensor_out>(self, indices, out);
    IndexLaunch l;
    l.wrap = 1;
    l.indexed_sizes = info.indexed_sizes;
    l.indexed_strides = info.indexed_strides;
    l.dims = info.dims;
    launch_iter(iter, self.scalar_type(), 1, 2, l, Err::Index);
    if (iter.numel() != 0) sync_checked(stream_of(self), Err::Index);
    tracking::record_executed("aten::index");
    return out;
}

Tensor &index_put_impl_(Tensor &self, const c10::List<std::optional<Tensor>> &indices,
                        const Tensor &value, bool accumulate, bool unsafe) {
    TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()),
                      "too many indices for tensor of dimension ", self.dim(), " (got ",
                      indices.size(), ")");
    if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
        TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. "
                   "Please clone() the tensor before performing this operation. "
                   "This also applies to advanced indexing e.g. tensor[indices] = tensor");
    if (!native(self.scalar_type()) || (accumulate && self.is_complex()))
        return fallback<at::_ops::_index_put_impl_>(self, indices, value, accumulate, unsafe);
    if (!accumulate) {
        auto [ok, mask] = at::native::canDispatchToMaskedFill(self, indices, value);
        if (ok) {
            tracking::record_executed("aten::_index_put_impl_");
            return self.masked_fill_(mask, value.item());
        }
    }
    Tensor v = value;
    if (value.device() != self.device() && value.numel() == 1 && value.dim() == 0)
        v = value.to(self.device());
    at::assert_no_overlap(self, value);
    for (const std::optional<Tensor> &index : indices)
        if (index.has_value()) at::assert_no_overlap(self, *index);
    Info info = make_info(self, indices);
    TORCH_CHECK(at::is_expandable_to(v.sizes(), info.src.sizes()),
                "shape mismatch: value tensor of shape ", v.sizes(),
                " cannot be broadcast to indexing result of shape ", info.src.sizes());
    TORCH_CHECK(v.scalar_type() == info.src.scalar_type(),
                "Index put requires the source and destination dtypes match, got ",
                info.src.scalar_type(), " for the destination and ", v.scalar_type(),
                " for the source.");
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(false)
        .resize_outputs(false)
        .check_all_same_dtype(false)
        .add_output(info.src)
        .add_const_input(v);
    for (auto &i : info.indices) config.add_const_input(i);
    auto iter = config.build();
    if (!fits(iter, info.indices.size()))
        return fallback<at::_ops::_index_put_impl_>(self, indices, value, accumulate, unsafe);
    IndexLaunch l;
    l.scatter = 1;
    l.reduce = accumulate ? TRN_INDEX_REDUCE_ADD : TRN_INDEX_REDUCE_NONE;
    l.wrap = 1;
    l.indexed_sizes = info.indexed_sizes;
    l.indexed_strides = info.indexed_strides;
    l.dims = info.dims;
    launch_iter(iter, self.scalar_type(), 1, 2, l, Err::Index);
    if (iter.numel() != 0) sync_checked(stream_of(self), Err::Index);
    tracking::record_executed("aten::_index_put_impl_");
    return self;
}

// ---------------------------------------------------------------------------
// index_select / index_add (one index along `dim`)
// ---------------------------------------------------------------------------
void check_index_vector(const char *op, const Tensor &index) {
    TORCH_CHECK_INDEX(index.dim() <= 1, op, "(): Index is supposed to be a vector");
    TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
                "(): Expected dtype int32 or int64 for index");
}

// The index vector viewed over `shape`, walking `dim`.
Tensor index_along(const Tensor &index, int64_t dim, at::IntArrayRef shape) {
    std::vector<int64_t> strides(shape.size(), 0);
    strides[dim] = index.dim() > 0 ? index.stride(0) : 0;
    return index.as_strided(shape, strides);
}

Tensor &index_select_out(const Tensor &self, int64_t dim, const Tensor &index, Tensor &out) {
    dim = at::maybe_wrap_dim(dim, self.dim());
    check_index_vector("index_select", index);
    TORCH_CHECK(self.scalar_type() == out.scalar_type(),
                "index_select(): self and result must have the same scalar type");
    TORCH_CHECK(index.device() == self.device(), "index_select(): index must be on ", self.device(),
                " but is on ", index.device());
    if (!native(self.scalar_type()))
        return fallback<at::_ops::index_select_out>(self, dim, index, out);
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self);
    at::assert_no_overlap(out, index);
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    if (self.dim() == 0) {
        TORCH_CHECK_INDEX(index.numel() == 1,
                          "index_select(): Index to scalar can have only 1 value, got ",
                          index.numel(), " value(s)");
        at::native::resize_output(out, {});
    } else {
        shape[dim] = index.numel();
        at::native::resize_output(out, shape);
    }
    const Tensor self1 = self.dim() == 0 ? self.view({1}) : self;
    const Tensor out1 = self.dim() == 0 ? out.view({1}) : out;
    if (self.dim() == 0) shape = {1};
    Tensor idx = as_long(index);
    auto iter = at::TensorIteratorConfig()
                    .set_check_mem_overlap(false)
                    .check_all_same_dtype(false)
                    .resize_outputs(false)
                    .add_output(out1)
                    .add_owned_const_input(restride_dim(self1, dim, shape))
                    .add_owned_const_input(index_along(idx, dim, shape))
                    .build();
    if (!fits(iter, 1)) return fallback<at::_ops::index_select_out>(self, dim, index, out);
    IndexLaunch l;
    l.indexed_sizes = {self1.size(dim)};
    l.indexed_strides = {self1.stride(dim) * self.element_size()};
    l.dims = {static_cast<int>(dim)};
    const Err kind = dim == 0 ? Err::IndexSelect0 : Err::IndexSelectN;
    launch_iter(iter, self.scalar_type(), 1, 2, l, kind);
    if (iter.numel() != 0) sync_checked(stream_of(self), kind);
    tracking::record_executed("aten::index_select");
    return out;
}

Tensor index_select(const Tensor &self, int64_t dim, const Tensor &index) {
    Tensor out = at::empty({0}, self.options());
    return index_select_out(self, dim, index, out);
}

// out = self; out[..., index[i], ...] += alpha * source[..., i, ...], or with
// `copy`, = source[..., i, ...] (index_copy: a static KV cache's update).
// `checked`: a synchronized check already proved `index` in range
// (index_checked.h), so the launch is not waited for.
bool index_add_run(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                   const Scalar &alpha, const Tensor &out, bool copy, bool checked = false) {
    dim = at::maybe_wrap_dim(dim, self.dim());
    check_index_vector("index_add_", index);
    TORCH_CHECK(index.numel() == (source.dim() == 0 ? 1 : source.size(dim)),
                "index_add_(): Number of indices (", index.numel(),
                ") should be equal to source.size(dim) (",
                (source.dim() == 0 ? 1 : source.size(dim)), ")");
    TORCH_CHECK(source.scalar_type() == self.scalar_type(), "index_add_(): self (",
                self.scalar_type(), ") and source (", source.scalar_type(),
                ") must have the same scalar type");
    if (!native(self.scalar_type()) || self.is_complex()) return false;
    if (!out.is_same(self)) {
        at::native::resize_output(out, self.sizes());
        out.copy_(self);
    }
    if (index.numel() == 0) return true;
    const bool scalar = self.dim() == 0;
    const Tensor out1 = scalar ? out.view({1}) : out;
    const Tensor src1 = source.dim() == 0 ? source.view({1}) : source;
    std::vector<int64_t> shape(out1.sizes().begin(), out1.sizes().end());
    shape[dim] = index.numel();
    TORCH_CHECK(src1.dim() == out1.dim(),
                "index_add_(): self and source must have the same number of dimensions");
    for (int64_t d = 0; d < out1.dim(); ++d)
        if (d != dim)
            TORCH_CHECK(src1.size(d) == out1.size(d),
                        "index_add_(): source and self sizes differ in dim ", d);
    Tensor idx = as_long(index);
    auto iter = at::TensorIteratorConfig()
                    .set_check_mem_overlap(false)
                    .check_all_same_dtype(false)
                    .resize_outputs(false)
                    .add_owned_output(restride_dim(out1, dim, shape))
                    .add_const_input(src1)
                    .add_owned_const_input(index_along(idx, dim, shape))
                    .build();
    if (!fits(iter, 1)) return false;
    IndexLaunch l;
    l.scatter = 1;
    l.reduce = copy ? TRN_INDEX_REDUCE_NONE : TRN_INDEX_REDUCE_ADD;
    l.alpha = alpha.toDouble();
    l.alpha_int = alpha.isIntegral(true) ? alpha.toLong() : static_cast<int64_t>(alpha.toDouble());
    l.indexed_sizes = {out1.size(dim)};
    l.indexed_strides = {out1.stride(dim) * self.element_size()};
    l.dims = {static_cast<int>(dim)};
    const Err kind = copy ? Err::IndexCopy : Err::Runtime;
    launch_iter(iter, self.scalar_type(), 1, 2, l, kind);
    if (!checked) sync_checked(stream_of(self), kind);
    return true;
}

Tensor &index_add_out(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                      const Scalar &alpha, Tensor &out) {
    // PyTorch's meta function: out's dtype and device, resize, no internal
    // overlap, no overlap with index or source; then, as CPU's copy of self
    // into out, no partial overlap with self (out may be self).
    MetaShape<at::meta::structured_index_add> meta(&out);
    meta.meta(self, dim, index, source, alpha);
    check_out_overlap(out, self);
    if (!index_add_run(self, dim, index, source, alpha, out, false))
        return fallback<at::_ops::index_add_out>(self, dim, index, source, alpha, out);
    tracking::record_executed("aten::index_add");
    return out;
}

Tensor &index_copy_out(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                       Tensor &out) {
    // PyTorch's meta function: index and source shape checks, out's dtype,
    // device and size, no internal overlap; then, as CPU, no partial overlap
    // of out with self (out may be self, the in-place form).
    MetaShape<at::meta::structured_index_copy> meta(&out);
    meta.meta(self, dim, index, source);
    check_out_overlap(out, self);
    if (!index_add_run(self, dim, index, source, 1, out, true))
        return fallback<at::_ops::index_copy_out>(self, dim, index, source, out);
    tracking::record_executed("aten::index_copy");
    return out;
}

// ---------------------------------------------------------------------------
// gather / scatter
// ---------------------------------------------------------------------------
Tensor &gather_out(const Tensor &self, int64_t dim, const Tensor &index, bool sparse_grad,
                   Tensor &out) {
    // PyTorch's meta function with out: dtype and device (the out= wrapper's
    // wording), resize, no internal overlap, no overlap with self, no partial
    // overlap with index, index dtype and shape checks.
    MetaShape<at::meta::structured_gather> meta(&out);
    meta.meta(self, dim, index, sparse_grad);
    dim = at::maybe_wrap_dim(dim, self.dim());
    TORCH_CHECK(self.scalar_type() == out.scalar_type(),
                "gather(): Expected self.dtype to be equal to src.dtype");
    at::native::resize_output(out, index.sizes());
    if (index.numel() == 0) {
        tracking::record_executed("aten::gather");
        return out;
    }
    if (!native(self.scalar_type()))
        return fallback<at::_ops::gather_out>(self, dim, index, sparse_grad, out);
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self);
    at::assert_no_partial_overlap(out, index);
    const bool scalar = self.dim() == 0;
    const Tensor self1 = scalar ? self.view({1}) : self;
    const Tensor idx1 = index.dim() == 0 ? as_long(index).view({1}) : as_long(index);
    const Tensor out1 = out.dim() == 0 ? out.view({1}) : out;
    auto iter = at::TensorIteratorConfig()
                    .set_check_mem_overlap(false)
                    .check_all_same_dtype(false)
                    .resize_outputs(false)
                    .add_output(out1)
                    .add_owned_const_input(restride_dim(self1, dim, idx1.sizes()))
                    .add_const_input(idx1)
                    .build();
    if (!fits(iter, 1)) return fallback<at::_ops::gather_out>(self, dim, index, sparse_grad, out);
    IndexLaunch l;
    l.indexed_sizes = {self1.size(dim)};
    l.indexed_strides = {self1.stride(dim) * self.element_size()};
    l.dims = {static_cast<int>(dim)};
    launch_iter(iter, self.scalar_type(), 1, 2, l, Err::Runtime);
    sync_checked(stream_of(self), Err::Runtime);
    tracking::record_executed("aten::gather");
    return out;
}

trn_index_reduce reduce_of(std::string_view r, bool two) {
    if (two) {
        if (r == "sum") return TRN_INDEX_REDUCE_ADD;
        if (r == "prod") return TRN_INDEX_REDUCE_MUL;
        if (r == "mean") return TRN_INDEX_REDUCE_MEAN;
        if (r == "amax") return TRN_INDEX_REDUCE_MAX;
        if (r == "amin") return TRN_INDEX_REDUCE_MIN;
        TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", r);
    }
    if (r == "add") return TRN_INDEX_REDUCE_ADD;
    if (r == "multiply") return TRN_INDEX_REDUCE_MUL;
    TORCH_CHECK(false, "reduce argument must be either add or multiply.");
}

// Identity of a reduction, stored where include_self=False scatters.
Scalar identity_of(trn_index_reduce r, at::ScalarType t) {
    Scalar v;
    AT_DISPATCH_V2(t, "neuron_identity", AT_WRAP([&] {
                       using lim = std::numeric_limits<scalar_t>;
                       switch (r) {
                       case TRN_INDEX_REDUCE_MUL: v = Scalar(1); break;
                       case TRN_INDEX_REDUCE_MAX:
                           v = lim::has_infinity ? Scalar(-lim::infinity()) : Scalar(lim::lowest());
                           break;
                       case TRN_INDEX_REDUCE_MIN:
                           v = lim::has_infinity ? Scalar(lim::infinity()) : Scalar(lim::max());
                           break;
                       default: v = Scalar(0); break;
                       }
                   }),
                   AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16,
                   AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
    return v;
}

// Scatters src (or `value` when src is undefined) into dst (already holding
// self) along dim with reduction r. Returns false when libtrn cannot.
bool scatter_into(const Tensor &dst, int64_t dim, const Tensor &index, const Tensor &src,
                  const Scalar *value, trn_index_reduce r, bool include_self) {
    const at::ScalarType t = dst.scalar_type();
    if (!native(t) || (r != TRN_INDEX_REDUCE_NONE && dst.is_complex())) return false;
    const Tensor dst1 = dst.dim() == 0 ? dst.view({1}) : dst;
    const Tensor idx1 = index.dim() == 0 ? as_long(index).view({1}) : as_long(index);
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(false)
        .check_all_same_dtype(false)
        .resize_outputs(false)
        .add_owned_output(restride_dim(dst1, dim, idx1.sizes()));
    if (src.defined()) {
        const Tensor src1 = src.dim() == 0 ? src.view({1}) : src;
        config.add_owned_const_input(src1.as_strided(idx1.sizes(), src1.strides()));
    }
    config.add_const_input(idx1);
    auto iter = config.build();
    if (!fits(iter, 1)) return false;
    IndexLaunch l;
    l.scatter = 1;
    l.reduce = r;
    l.include_self = include_self;
    l.out_numel = dst.numel();
    l.indexed_sizes = {dst1.size(dim)};
    l.indexed_strides = {dst1.stride(dim) * dst.element_size()};
    l.dims = {static_cast<int>(dim)};
    if (value) scalar_bytes(*value, t, l.value);
    if (!include_self) {  // positions that receive values start from the identity
        IndexLaunch init = l;
        init.reduce = TRN_INDEX_REDUCE_NONE;
        scalar_bytes(identity_of(r, t), t, init.value);
        launch_iter(iter, t, -1, src.defined() ? 2 : 1, init, Err::Runtime);
    }
    launch_iter(iter, t, src.defined() ? 1 : -1, src.defined() ? 2 : 1, l, Err::Runtime);
    sync_checked(stream_of(dst), Err::Runtime);
    return true;
}

bool scatter_run(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                 const Scalar *value, trn_index_reduce r, bool include_self, const Tensor &out,
                 const char *name) {
    dim = at::maybe_wrap_dim(dim, self.dim());
    at::native::scatter_gather_dtype_check(
        name, self, index, src.defined() ? std::optional<Tensor>(src) : std::nullopt);
    at::native::scatter_shape_check(self, dim, index,
                                    src.defined() ? std::optional<Tensor>(src) : std::nullopt);
    TORCH_CHECK(out.scalar_type() == self.scalar_type(), name,
                "(): Expected out tensor to have dtype ", self.scalar_type());
    if (!native(self.scalar_type()) || (r != TRN_INDEX_REDUCE_NONE && self.is_complex()))
        return false;
    if (!out.is_same(self)) {
        at::native::resize_output(out, self.sizes());
        out.copy_(self);
    }
    if (index.numel() == 0) return true;
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, index);
    if (src.defined()) at::assert_no_overlap(out, src);
    // MEAN keeps a count per element of a contiguous destination.
    const bool need_contig = r == TRN_INDEX_REDUCE_MEAN && !out.is_contiguous();
    Tensor dst = need_contig ? out.contiguous() : out;
    if (!scatter_into(dst, dim, index, src, value, r, include_self)) return false;
    if (need_contig) out.copy_(dst);
    return true;
}

// Each out= form first runs PyTorch's meta function with out (`meta_args`):
// dtype and device (the out= wrapper's wording), resize, no internal overlap,
// no overlap with index or src; then, as CPU's copy of self into out, no
// partial overlap with self (out may be self).
#define SCATTER_OUT(fnname, opname, Op, S, meta_args, params, call_args, src_expr, value_expr,     \
                    red, self_flag)                                                                \
    Tensor &fnname params {                                                                        \
        MetaShape<S> meta(&out);                                                                   \
        meta.meta meta_args;                                                                       \
        check_out_overlap(out, self);                                                              \
        Tensor src_t = src_expr;                                                                   \
        if (!scatter_run(self, dim, index, src_t, value_expr, red, self_flag, out, "scatter"))     \
            return fallback<Op> call_args;                                                         \
        tracking::record_executed(opname);                                                         \
        return out;                                                                                \
    }

SCATTER_OUT(scatter_src_out, "aten::scatter", at::_ops::scatter_src_out,
            at::meta::structured_scatter_src, (self, dim, index, src),
            (const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src, Tensor &out),
            (self, dim, index, src, out), src, nullptr, TRN_INDEX_REDUCE_NONE, true)
SCATTER_OUT(scatter_value_out, "aten::scatter", at::_ops::scatter_value_out,
            at::meta::structured_scatter_value, (self, dim, index, value),
            (const Tensor &self, int64_t dim, const Tensor &index, const Scalar &value,
             Tensor &out),
            (self, dim, index, value, out), Tensor(), &value, TRN_INDEX_REDUCE_NONE, true)
SCATTER_OUT(scatter_reduce_out, "aten::scatter", at::_ops::scatter_reduce_out,
            at::meta::structured_scatter_reduce, (self, dim, index, src, reduce),
            (const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
             c10::string_view reduce, Tensor &out),
            (self, dim, index, src, reduce, out), src, nullptr, reduce_of(reduce, false), true)
SCATTER_OUT(scatter_value_reduce_out, "aten::scatter", at::_ops::scatter_value_reduce_out,
            at::meta::structured_scatter_value_reduce, (self, dim, index, value, reduce),
            (const Tensor &self, int64_t dim, const Tensor &index, const Scalar &value,
             c10::string_view reduce, Tensor &out),
            (self, dim, index, value, reduce, out), Tensor(), &value, reduce_of(reduce, false),
            true)
SCATTER_OUT(scatter_add_out, "aten::scatter_add", at::_ops::scatter_add_out,
            at::meta::structured_scatter_add, (self, dim, index, src),
            (const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src, Tensor &out),
            (self, dim, index, src, out), src, nullptr, TRN_INDEX_REDUCE_ADD, true)
SCATTER_OUT(scatter_reduce_two_out, "aten::scatter_reduce", at::_ops::scatter_reduce_two_out,
            at::meta::structured_scatter_reduce_two, (self, dim, index, src, reduce, include_self),
            (const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
             c10::string_view reduce, bool include_self, Tensor &out),
            (self, dim, index, src, reduce, include_self, out), src, nullptr,
            reduce_of(reduce, true), include_self)

// ---------------------------------------------------------------------------
// masks
// ---------------------------------------------------------------------------
Tensor &masked_fill_scalar(Tensor &self, const Tensor &mask, const Scalar &value) {
    TORCH_CHECK(mask.scalar_type() == at::kBool,
                "masked_fill_ only supports boolean masks, but got mask with dtype ",
                mask.scalar_type());
    if (!native(self.scalar_type()))
        return fallback<at::_ops::masked_fill__Scalar>(self, mask, value);
    if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
        TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. "
                   "Please clone() the tensor before performing this operation. "
                   "This also applies to advanced indexing e.g. tensor[mask] = scalar");
    at::assert_no_partial_overlap(self, mask);
    Tensor m = mask.device() == self.device() ? mask : mask.to(self.device());
    auto iter = at::TensorIteratorConfig()
                    .set_check_mem_overlap(false)
                    .check_all_same_dtype(false)
                    .resize_outputs(false)
                    .add_output(self)
                    .add_const_input(m)
                    .build();
    if (iter.ndim() > TRN_INDEX_MAX_DIMS)
        return fallback<at::_ops::masked_fill__Scalar>(self, mask, value);
    if (iter.numel() != 0) {
        trn_mask_fill_desc d{};
        d.dtype = *native_dtype(self.scalar_type());
        d.ndim = static_cast<int>(iter.ndim());
        d.sizes = iter.shape().data();
        d.out = iter.data_ptr(0);
        d.out_strides = iter.strides(0).data();
        d.mask = iter.data_ptr(1);
        d.mask_strides = iter.strides(1).data();
        scalar_bytes(value, self.scalar_type(), d.value);
        TRN_CHECK(trn_mask_fill_launch(stream_of(self), &d));
    }
    tracking::record_executed("aten::masked_fill_");
    return self;
}

Tensor &masked_fill_tensor(Tensor &self, const Tensor &mask, const Tensor &value) {
    TORCH_CHECK(value.dim() == 0,
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                value.dim(), " dimension(s).");
    return masked_fill_scalar(self, mask, value.item());
}

// A tensor as libtrn's row-major scan view (strides in elements).
trn_nz_tensor nz_view(const Tensor &t) {
    return trn_nz_tensor{*native_dtype(t.scalar_type()), static_cast<int>(t.dim()),
                         t.sizes().data(), t.data_ptr(), t.strides().data()};
}

int64_t count_nonzero_sync(const Tensor &t) {
    int64_t count = 0;
    trn_nz_tensor v = nz_view(t);
    trn_stream *s = stream_of(t);
    TRN_CHECK(trn_count_nonzero_launch(s, &v, &count));
    TRN_CHECK(trn_stream_synchronize(s));  // the count lives on the host
    return count;
}

Tensor &nonzero_out(const Tensor &self, Tensor &out) {
    TORCH_CHECK(out.scalar_type() == at::kLong,
                "nonzero: Expected out tensor to have scalar type Long but got scalar type",
                out.scalar_type());
    check_out_device(out, self.device());
    if (!native(self.scalar_type()) || self.dim() > TRN_INDEX_MAX_DIMS)
        return fallback<at::_ops::nonzero_out>(self, out);
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self);
    const int64_t n = count_nonzero_sync(self);
    at::native::resize_output(out, {n, self.dim()});
    if (n > 0 && self.dim() > 0) {
        trn_nz_tensor v = nz_view(self);
        TRN_CHECK(trn_nonzero_launch(stream_of(self), &v, n, out.data_ptr<int64_t>(), out.stride(0),
                                     out.stride(1)));
    }
    tracking::record_executed("aten::nonzero");
    return out;
}

Tensor nonzero(const Tensor &self) {
    Tensor out = at::empty({0}, self.options().dtype(at::kLong));
    return nonzero_out(self, out);
}

Tensor &masked_select_out(const Tensor &self, const Tensor &mask, Tensor &out) {
    TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
    TORCH_CHECK(self.scalar_type() == out.scalar_type(),
                "masked_select(): self and result must have the same scalar type");
    check_out_device(out, self.device());
    if (!native(self.scalar_type())) return fallback<at::_ops::masked_select_out>(self, mask, out);
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self);
    at::assert_no_overlap(out, mask);
    Tensor m = mask.device() == self.device() ? mask : mask.to(self.device());
    auto [bm, bs] = at::expand_outplace(m, self);
    if (bs->dim() > TRN_INDEX_MAX_DIMS)
        return fallback<at::_ops::masked_select_out>(self, mask, out);
    const int64_t n = count_nonzero_sync(*bm);
    at::native::resize_output(out, {n});
    if (n > 0) {
        trn_nz_tensor src = nz_view(*bs), mv = nz_view(*bm);
        TRN_CHECK(
            trn_masked_select_launch(stream_of(self), &src, &mv, n, out.data_ptr(), out.stride(0)));
    }
    tracking::record_executed("aten::masked_select");
    return out;
}

Tensor masked_select(const Tensor &self, const Tensor &mask) {
    Tensor out = at::empty({0}, self.options());
    return masked_select_out(self, mask, out);
}

// ---------------------------------------------------------------------------
// cat
// ---------------------------------------------------------------------------
// Copies `mat` into `out` (sized by cat's meta function, no overlap with the
// inputs, a native dtype): the shared body of cat and cat.out.
void cat_run(const at::MaterializedITensorListRef &mat, int64_t dim, Tensor &out) {
    if (out.numel() == 0) {
        tracking::record_executed("aten::cat");
        return;
    }
    dim = at::legacy_cat_wrap_dim(dim, mat);
    std::vector<Tensor> keep;  // converted inputs stay alive until launched
    std::vector<trn_cat_input> inputs;
    keep.reserve(mat.size());
    inputs.reserve(mat.size());
    for (const Tensor &t : mat) {
        if (t.dim() == 1 && t.size(0) == 0 && out.dim() != 1)
            continue;  // legacy empty tensors are skipped
        keep.push_back(t.scalar_type() == out.scalar_type() ? t : t.to(out.scalar_type()));
    }
    for (const Tensor &t : keep) inputs.push_back({t.data_ptr(), t.strides().data(), t.size(dim)});
    trn_cat_desc d{};
    d.dtype = *native_dtype(out.scalar_type());
    d.ndim = static_cast<int>(out.dim());
    d.sizes = out.sizes().data();
    d.out = out.data_ptr();
    d.out_strides = out.strides().data();
    d.dim = static_cast<int>(dim);
    d.ninputs = static_cast<int>(inputs.size());
    d.inputs = inputs.data();
    TRN_CHECK(trn_cat_launch(stream_of(out), &d));
    tracking::record_executed("aten::cat");
}

Tensor &cat_out(const at::ITensorListRef &tensors, int64_t dim, Tensor &out) {
    auto mat = tensors.materialize();
    // PyTorch's own (C++) meta function decides the shape, dtype and every
    // error.
    MetaShape<at::meta::structured_cat, /*Alloc=*/false> shape_of;
    shape_of.meta(tensors, dim);
    TORCH_CHECK_TYPE(at::canCast(shape_of.dtype(0), out.scalar_type()),
                     "torch.cat(): input types can't be cast to the desired output type ",
                     out.scalar_type());
    for (const Tensor &t : mat)
        TORCH_CHECK(t.device() == out.device(),
                    "torch.cat(): all input tensors and out must be on the same device, but "
                    "inputs are on ",
                    t.device(), " and out is on ", out.device());
    at::native::resize_output(out, shape_of.sizes(0));
    if (!native(out.scalar_type()) || out.dim() > TRN_INDEX_MAX_DIMS)
        return fallback<at::_ops::cat_out>(tensors, dim, out);
    at::assert_no_internal_overlap(out);
    for (const Tensor &t : mat) at::assert_no_overlap(out, t);
    cat_run(mat, dim, out);
    return out;
}

// The functional form (a decode step's KV-cache append): without it PyTorch's
// composite kernel ran the meta function, allocated through the dispatcher and
// called cat.out, which ran the meta function again. The output is allocated
// as the meta function declares it (its dtype and memory format), so it cannot
// overlap an input and needs no resize.
Tensor cat(const at::ITensorListRef &tensors, int64_t dim) {
    MetaShape<at::meta::structured_cat, /*Alloc=*/false> shape_of;
    shape_of.meta(tensors, dim);
    auto mat = tensors.materialize();
    for (const Tensor &t : mat)
        TORCH_CHECK(t.device() == shape_of.options(0).device(),
                    "torch.cat(): all input tensors and out must be on the same device, but "
                    "inputs are on ",
                    t.device(), " and out is on ", shape_of.options(0).device());
    Tensor out = at::empty(shape_of.sizes(0), shape_of.options(0));
    if (!native(out.scalar_type()) || out.dim() > TRN_INDEX_MAX_DIMS)
        return fallback<at::_ops::cat_out>(tensors, dim, out);
    cat_run(mat, dim, out);
    return out;
}

// ---------------------------------------------------------------------------
// slice_backward: zeros outside the slice, the gradient inside, each output
// element written once (PyTorch's composite zero-fills, then copies).
// ---------------------------------------------------------------------------
// slice()'s bounds: negative ones count from the end, both clamped to [0, size].
int64_t slice_bound(int64_t v, int64_t size) {
    if (v < 0) v = v < -size ? 0 : v + size;
    return v > size ? size : v;
}

Tensor slice_backward(const Tensor &grad, c10::SymIntArrayRef sym_sizes, int64_t dim,
                      c10::SymInt sym_start, c10::SymInt sym_end, c10::SymInt sym_step) {
    const at::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(sym_sizes);
    const int64_t step = sym_step.guard_int(__FILE__, __LINE__);
    const int64_t nd = static_cast<int64_t>(sizes.size());
    bool ok = native(grad.scalar_type()) && nd >= 1 && nd <= TRN_INDEX_MAX_DIMS && step > 0 &&
              grad.dim() == nd;
    int64_t start = 0, count = 0;
    if (ok) {
        dim = at::maybe_wrap_dim(dim, nd);
        const int64_t size = sizes[dim];
        start = slice_bound(sym_start.guard_int(__FILE__, __LINE__), size);
        const int64_t end =
            std::max(start, slice_bound(sym_end.guard_int(__FILE__, __LINE__), size));
        count = (end - start + step - 1) / step;
        for (int64_t k = 0; k < nd && ok; k++) ok = grad.size(k) == (k == dim ? count : sizes[k]);
    }
    if (!ok) {  // PyTorch's composite: its checks, broadcasting and errors
        Tensor out = at::zeros_symint(sym_sizes, grad.options());
        out.slice_symint(dim, std::move(sym_start), std::move(sym_end), std::move(sym_step))
            .copy_(grad);
        return out;
    }
    Tensor out = at::empty(sizes, grad.options());
    if (out.numel() > 0) {
        trn_slice_backward_desc d{};
        d.dtype = *native_dtype(out.scalar_type());
        d.ndim = static_cast<int>(nd);
        d.sizes = sizes.data();
        d.out = out.data_ptr();
        d.grad = count > 0 ? grad.const_data_ptr() : nullptr;
        d.grad_strides = grad.strides().data();
        d.dim = static_cast<int>(dim);
        d.start = start;
        d.step = step;
        d.count = count;
        TRN_CHECK(trn_slice_backward_launch(stream_of(out), &d));
    }
    tracking::record_executed("aten::slice_backward");
    return out;
}

// ---------------------------------------------------------------------------
// embedding backward: zeros, index_add of the gradient rows, padding row
// cleared (it only ever receives the rows whose index is padding_idx).
// ---------------------------------------------------------------------------
void fill_zero(const Tensor &t) {
    if (t.numel() == 0) return;
    auto iter = at::TensorIteratorConfig()
                    .set_check_mem_overlap(false)
                    .check_all_same_dtype(false)
                    .resize_outputs(false)
                    .add_output(t)
                    .build();
    IndexLaunch l;
    l.scatter = 1;
    launch_iter(iter, t.scalar_type(), -1, 1, l);
}

// ATen's embedding (index_select of the flattened indices), noting the
// indices as the caller passed them checked: a non-contiguous index tensor
// is flattened into a copy, and the backward flattens it into another. The
// only note: index_select itself notes nothing (nothing else reads it).
Tensor embedding(const Tensor &weight, const Tensor &indices, c10::SymInt padding_idx,
                 bool scale_grad_by_freq, bool sparse) {
    Tensor out = at::native::embedding_symint(weight, indices, std::move(padding_idx),
                                              scale_grad_by_freq, sparse);
    if (weight.dim() == 2 && indices.numel() != 0)
        index_checked_note(indices, {IndexCheck::Kind::Index, weight.size(0)});
    return out;
}

Tensor embedding_dense_backward(const Tensor &grad, const Tensor &indices, int64_t num_weights,
                                int64_t padding_idx, bool scale_grad_by_freq) {
    if (scale_grad_by_freq || !native(grad.scalar_type()) || grad.is_complex() ||
        (indices.scalar_type() != at::kLong && indices.scalar_type() != at::kInt))
        return fallback<at::_ops::embedding_dense_backward>(grad, indices, num_weights, padding_idx,
                                                            scale_grad_by_freq);
    const int64_t width = grad.size(-1);
    Tensor weight = at::empty({num_weights, width}, grad.options());
    fill_zero(weight);
    // The embedding's forward checked these indices against the weight's rows
    // unless they were written since or come from elsewhere.
    const bool checked = index_checked_covers(indices, {IndexCheck::Kind::Index, num_weights});
    Tensor flat_idx = indices.reshape({-1});
    Tensor flat_grad = grad.reshape({flat_idx.numel(), width});
    if (flat_idx.numel() > 0)
        TORCH_CHECK(index_add_run(weight, 0, flat_idx, flat_grad, 1, weight, false, checked),
                    "embedding_dense_backward: unsupported input");
    if (padding_idx >= 0 && padding_idx < num_weights) fill_zero(weight.select(0, padding_idx));
    tracking::record_executed("aten::embedding_dense_backward");
    return weight;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("index.Tensor_out", TORCH_FN(index_out));
    m.impl("_index_put_impl_", TORCH_FN(index_put_impl_));
    m.impl("index_select", TORCH_FN(index_select));
    m.impl("index_select.out", TORCH_FN(index_select_out));
    m.impl("index_add.out", TORCH_FN(index_add_out));
    m.impl("index_copy.out", TORCH_FN(index_copy_out));
    m.impl("gather.out", TORCH_FN(gather_out));
    m.impl("scatter.src_out", TORCH_FN(scatter_src_out));
    m.impl("scatter.value_out", TORCH_FN(scatter_value_out));
    m.impl("scatter.reduce_out", TORCH_FN(scatter_reduce_out));
    m.impl("scatter.value_reduce_out", TORCH_FN(scatter_value_reduce_out));
    m.impl("scatter_add.out", TORCH_FN(scatter_add_out));
    m.impl("scatter_reduce.two_out", TORCH_FN(scatter_reduce_two_out));
    m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
    m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
    m.impl("masked_select", TORCH_FN(masked_select));
    m.impl("masked_select.out", TORCH_FN(masked_select_out));
    m.impl("nonzero", TORCH_FN(nonzero));
    m.impl("nonzero.out", TORCH_FN(nonzero_out));
    m.impl("cat", TORCH_FN(cat));
    m.impl("cat.out", TORCH_FN(cat_out));
    m.impl("slice_backward", TORCH_FN(slice_backward));
    m.impl("embedding", TORCH_FN(embedding));
    m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
}

}  // namespace neuron
