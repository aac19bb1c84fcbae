// aten/shape.cpp - creation, layout and sort/select ops on neuron: fill_,
// zero_, arange, linspace, eye, tril/triu, flip, roll, constant_pad_nd,
// sort, topk, unique.
//
// PyTorch decides shapes and errors: each op first runs on meta tensors
// (the meta functions its CPU kernels share), then this file turns the
// result into libtrn descriptors (trn/fill.h, trn/sort.h, and trn/copy.h for
// flip/roll/pad, which are strided copies with offset pointers and negated
// strides). Dtypes libtrn lacks (complex for sort/ranges) go to the CPU
// fallback.
#include <ATen/Dispatch_v2.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/topk_meta.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

#include <cstring>
#include <map>
#include <vector>

#include "aten/meta.h"
#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

Tensor meta_of(const Tensor &t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

Tensor meta_out(const Tensor &out) {
    return at::empty_strided(out.sizes(), out.strides(), out.options().device(at::kMeta));
}

trn_stream *stream_of(const Tensor &t) { return current_trn_stream(t.device().index()); }

void scalar_bytes(const Scalar &v, ScalarType type, unsigned char out[16]) {
    std::memset(out, 0, 16);
    AT_DISPATCH_V2(type, "neuron_fill_bytes", AT_WRAP([&] {
                       scalar_t x = v.to<scalar_t>();
                       std::memcpy(out, &x, sizeof x);
                   }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16,
                   AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES), AT_EXPAND(AT_FLOAT8_TYPES));
}

bool sortable(ScalarType t) {
    auto n = native_dtype(t);
    return n && trn_sort_supports(*n);
}

// ---------------------------------------------------------------------------
// fill_ / zero_
// ---------------------------------------------------------------------------
// Fills `self` from host bytes or a device pointer. Dims of stride 0 alias
// one element and are dropped (fill_ of an expanded tensor is allowed).
void launch_fill(const Tensor &self, const unsigned char *value, const void *value_ptr) {
    if (self.numel() == 0) return;
    std::vector<int64_t> sz, st;
    for (int64_t d = 0; d < self.dim(); ++d)
        if (self.stride(d) != 0 || self.size(d) <= 1) {
            sz.push_back(self.size(d));
            st.push_back(self.stride(d));
        }
    trn_fill_desc d{};
    d.dtype = *native_dtype(self.scalar_type());
    d.ndim = static_cast<int>(sz.size());
    d.sizes = sz.data();
    d.strides = st.data();
    d.out = self.data_ptr();
    if (value) std::memcpy(d.value, value, 16);
    d.value_ptr = value_ptr;
    TRN_CHECK(trn_fill_launch(stream_of(self), &d));
}

Tensor &fill_scalar(Tensor &self, const Scalar &value) {
    if (!native_dtype(self.scalar_type())) return fallback<at::_ops::fill__Scalar>(self, value);
    unsigned char bytes[16];
    scalar_bytes(value, self.scalar_type(), bytes);
    launch_fill(self, bytes, nullptr);
    tracking::record_executed("aten::fill_");
    return self;
}

Tensor &fill_tensor(Tensor &self, const Tensor &value) {
    TORCH_CHECK(value.dim() == 0,
                "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
                " dimensions.");
    if (value.device().type() != kNeuron || !native_dtype(self.scalar_type()))
        return fill_scalar(self, value.item());
    Tensor v = value.scalar_type() == self.scalar_type() ? value : value.to(self.scalar_type());
    if (v.device() != self.device()) v = v.to(self.device());
    launch_fill(self, nullptr, v.const_data_ptr());
    tracking::record_executed("aten::fill_");
    return self;
}

Tensor &zero_(Tensor &self) {
    if (!native_dtype(self.scalar_type())) return fallback<at::_ops::zero_>(self);
    unsigned char bytes[16] = {0};
    launch_fill(self, bytes, nullptr);
    tracking::record_executed("aten::zero_");
    return self;
}

// ---------------------------------------------------------------------------
// arange / linspace / eye
// ---------------------------------------------------------------------------
bool range_ok(ScalarType t) {
    return !at::isComplexType(t) && t != at::kBool && native_dtype(t).has_value();
}

// torch.arange's size and checks, as every backend computes them (ATen's
// RangeUtils.h). The meta kernel would give the same, but it is a Python
// reference (prims.iota): 110 us of a 120 us arange, a few per generated
// token. The meta call stays for an `out=` that is resized (its warning).
static int64_t arange_size(const Scalar &start, const Scalar &end, const Scalar &step,
                           ScalarType t) {
    return t == at::kLong ? at::native::compute_arange_size<int64_t>(start, end, step)
                          : at::native::compute_arange_size<double>(start, end, step);
}

Tensor &arange_out(const Scalar &start, const Scalar &end, const Scalar &step, Tensor &out) {
    if (!range_ok(out.scalar_type()))
        return fallback<at::_ops::arange_start_out>(start, end, step, out);
    const int64_t n = arange_size(start, end, step, out.scalar_type());
    const bool shaped = out.dim() == 1 && out.size(0) == n;
    if (out.numel() != 0 && !shaped) {
        Tensor mo = meta_out(out);
        at::_ops::arange_start_out::call(start, end, step, mo);  // PyTorch's resize warning
    }
    if (!shaped) out.resize_({n});
    check_out_overlap(out);
    trn_range_desc d{};
    d.kind = TRN_RANGE_ARANGE;
    d.dtype = *native_dtype(out.scalar_type());
    d.n = out.numel();
    d.out = out.data_ptr();
    d.stride = out.dim() ? out.stride(0) : 1;
    if (at::isFloatingType(out.scalar_type())) {
        d.start = start.to<double>();
        d.step = step.to<double>();
    } else {
        d.istart = start.to<int64_t>();
        d.istep = step.to<int64_t>();
    }
    TRN_CHECK(trn_range_launch(stream_of(out), &d));
    tracking::record_executed("aten::arange");
    return out;
}

Tensor &linspace_out(const Scalar &start, const Scalar &end, int64_t steps, Tensor &out) {
    Tensor mo = meta_out(out);
    at::_ops::linspace_out::call(start, end, steps, mo);
    if (!range_ok(out.scalar_type()))
        return fallback<at::_ops::linspace_out>(start, end, steps, out);
    if (out.sizes() != mo.sizes()) out.resize_(mo.sizes());
    check_out_overlap(out);
    trn_range_desc d{};
    d.kind = TRN_RANGE_LINSPACE;
    d.dtype = *native_dtype(out.scalar_type());
    d.n = out.numel();
    d.out = out.data_ptr();
    d.stride = out.dim() ? out.stride(0) : 1;
    // start and end as the dtype holds them (PyTorch converts first).
    AT_DISPATCH_V2(out.scalar_type(), "neuron_linspace", AT_WRAP([&] {
                       d.start = static_cast<double>(start.to<scalar_t>());
                       d.end = static_cast<double>(end.to<scalar_t>());
                   }),
                   AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16,
                   AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
    TRN_CHECK(trn_range_launch(stream_of(out), &d));
    tracking::record_executed("aten::linspace");
    return out;
}

Tensor &eye_m_out(int64_t n, int64_t m, Tensor &out) {
    TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
    TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
    if (!native_dtype(out.scalar_type())) return fallback<at::_ops::eye_m_out>(n, m, out);
    out.resize_({n, m});
    unsigned char zero[16] = {0}, one[16];
    launch_fill(out, zero, nullptr);
    const int64_t sz = std::min(n, m);
    if (sz > 0) {
        scalar_bytes(1, out.scalar_type(), one);
        launch_fill(out.as_strided({sz}, {out.stride(0) + out.stride(1)}), one, nullptr);
    }
    tracking::record_executed("aten::eye");
    return out;
}

Tensor &eye_out(int64_t n, Tensor &out) { return eye_m_out(n, n, out); }

// ---------------------------------------------------------------------------
// tril / triu
// ---------------------------------------------------------------------------
void launch_tri(bool upper, const Tensor &self, int64_t k, const Tensor &out) {
    if (out.numel() == 0) return;
    trn_tri_desc d{};
    d.upper = upper;
    d.diagonal = k;
    d.dtype = *native_dtype(self.scalar_type());
    d.ndim = static_cast<int>(self.dim());
    d.sizes = self.sizes().data();
    d.in = self.const_data_ptr();
    d.in_strides = self.strides().data();
    d.out = out.data_ptr();
    d.out_strides = out.strides().data();
    TRN_CHECK(trn_tri_launch(stream_of(out), &d));
}

template <bool Upper> Tensor tri(const Tensor &self, int64_t k) {
    Tensor m =
        Upper ? at::_ops::triu::call(meta_of(self), k) : at::_ops::tril::call(meta_of(self), k);
    if (!native_dtype(self.scalar_type()))
        return Upper ? fallback<at::_ops::triu>(self, k) : fallback<at::_ops::tril>(self, k);
    Tensor out = at::empty_strided(m.sizes(), m.strides(), self.options());
    launch_tri(Upper, self, k, out);
    tracking::record_executed(Upper ? "aten::triu" : "aten::tril");
    return out;
}

template <bool Upper> Tensor &tri_out(const Tensor &self, int64_t k, Tensor &out) {
    // PyTorch's meta function with out (dtype, device, resize), then
    // TensorIterator's overlap rule.
    using S = std::conditional_t<Upper, at::meta::structured_triu, at::meta::structured_tril>;
    MetaShape<S> meta(&out);
    meta.meta(self, k);
    check_out_overlap(out, self);
    if (!native_dtype(self.scalar_type()))
        return Upper ? fallback<at::_ops::triu_out>(self, k, out)
                     : fallback<at::_ops::tril_out>(self, k, out);
    // Element to element: in place when out is self's memory with self's
    // strides, through a temporary when it is that memory otherwise.
    if (out_aliases(out, self) &&
        !(out.data_ptr() == self.data_ptr() && out.strides() == self.strides())) {
        Tensor tmp = at::empty(out.sizes(), out.options());
        launch_tri(Upper, self, k, tmp);
        out.copy_(tmp);
    } else {
        launch_tri(Upper, self, k, out);
    }
    tracking::record_executed(Upper ? "aten::triu" : "aten::tril");
    return out;
}

template <bool Upper> Tensor &tri_(Tensor &self, int64_t k) {
    Tensor ms = meta_of(self);
    Upper ? at::_ops::triu_::call(ms, k) : at::_ops::tril_::call(ms, k);
    if (!native_dtype(self.scalar_type()))
        return Upper ? fallback<at::_ops::triu_>(self, k) : fallback<at::_ops::tril_>(self, k);
    launch_tri(Upper, self, k, self);
    tracking::record_executed(Upper ? "aten::triu" : "aten::tril");
    return self;
}

// ---------------------------------------------------------------------------
// flip / roll / constant_pad_nd: strided copies
// ---------------------------------------------------------------------------
// dst <- src elementwise over `sizes`, both given by base pointer + element
// strides (src strides may be negative), same dtype.
void launch_copy_view(const Tensor &like, IntArrayRef sizes, void *dst, IntArrayRef dst_strides,
                      const void *src, IntArrayRef src_strides) {
    int64_t numel = 1;
    for (auto s : sizes) numel *= s;
    if (numel == 0) return;
    auto n = native_dtype(like.scalar_type());
    trn_dtype t = n ? *n : bytewise_dtype(like.scalar_type());
    trn_copy_desc c{};
    c.ndim = static_cast<int>(sizes.size());
    c.sizes = sizes.data();
    c.dst = dst;
    c.dst_strides = dst_strides.data();
    c.dst_dtype = t;
    c.src = src;
    c.src_strides = src_strides.data();
    c.src_dtype = t;
    TRN_CHECK(trn_copy_launch(stream_of(like), &c));
}

char *elem_ptr(const Tensor &t, int64_t offset_elems) {
    return static_cast<char *>(const_cast<void *>(t.const_data_ptr())) +
           offset_elems * static_cast<int64_t>(t.element_size());
}

Tensor flip(const Tensor &self, IntArrayRef dims) {
    at::_ops::flip::call(meta_of(self), dims);  // dim checks
    const int64_t nd = self.dim();
    auto mask = at::dim_list_to_bitset(dims, nd);
    Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
    std::vector<int64_t> sst(self.strides().begin(), self.strides().end());
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d)
        if (mask[d] && self.size(d) > 1) {
            off += (self.size(d) - 1) * sst[d];
            sst[d] = -sst[d];
        }
    if (self.numel() != 0)
        launch_copy_view(self, self.sizes(), out.data_ptr(), out.strides(), elem_ptr(self, off),
                         sst);
    tracking::record_executed("aten::flip");
    return out;
}

Tensor roll(const Tensor &self, IntArrayRef shifts, IntArrayRef dims) {
    at::_ops::roll::call(meta_of(self), c10::fromIntArrayRefSlow(shifts),
                         dims);  // PyTorch's argument checks
    if (dims.empty()) {
        TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(),
                    ", dims:", dims.size());
        Tensor flat = self.contiguous().view({-1});
        const int64_t d0[1] = {0};
        return neuron::roll(flat, shifts, IntArrayRef(d0, 1)).view(self.sizes());
    }
    TORCH_CHECK(shifts.size() == dims.size(),
                "shifts and dimensions must align. shifts: ", shifts.size(),
                ", dims:", dims.size());
    const int64_t nd = self.dim();
    std::map<int64_t, int64_t> shift;  // net shift per dim
    for (size_t i = 0; i < dims.size(); ++i) {
        const int64_t d = c10::maybe_wrap_dim(dims[i], nd);
        shift[d] += shifts[i];
    }
    Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
    if (self.numel() != 0) {
        std::vector<int64_t> rd, rs;  // rolled dims, normalized shifts
        for (auto &[d, s] : shift) {
            const int64_t n = self.size(d);
            const int64_t r = ((s % n) + n) % n;
            if (r != 0) {
                rd.push_back(d);
                rs.push_back(r);
            }
        }
        const size_t k = rd.size();
        std::vector<int64_t> sz(self.sizes().begin(), self.sizes().end());
        for (uint64_t combo = 0; combo < (uint64_t(1) << k); ++combo) {
            int64_t soff = 0, doff = 0;
            bool empty = false;
            for (size_t i = 0; i < k; ++i) {
                const int64_t d = rd[i], n = self.size(d), r = rs[i];
                if (combo >> i & 1) {  // tail of the input -> head of the output
                    sz[d] = r;
                    soff += (n - r) * self.stride(d);
                } else {  // head of the input -> after the shift
                    sz[d] = n - r;
                    doff += r * out.stride(d);
                }
                empty |= sz[d] == 0;
            }
            if (!empty)
                launch_copy_view(self, sz, elem_ptr(out, doff), out.strides(), elem_ptr(self, soff),
                                 self.strides());
        }
    }
    tracking::record_executed("aten::roll");
    return out;
}

Tensor constant_pad_nd(const Tensor &self, IntArrayRef pad, const Scalar &value) {
    Tensor m = at::_ops::constant_pad_nd::call(meta_of(self), c10::fromIntArrayRefSlow(pad), value);
    if (!native_dtype(self.scalar_type()))
        return fallback<at::_ops::constant_pad_nd>(self, pad, value);
    Tensor out = at::empty(m.sizes(), self.options().memory_format(self.suggest_memory_format()));
    const int64_t nd = self.dim();
    const int64_t np = static_cast<int64_t>(pad.size()) / 2;
    // The input's part that survives and where it lands.
    std::vector<int64_t> sz(self.sizes().begin(), self.sizes().end());
    int64_t soff = 0, doff = 0;
    bool interior_empty = false;
    for (int64_t i = 0; i < np; ++i) {
        const int64_t d = nd - 1 - i, lo = pad[2 * i], hi = pad[2 * i + 1];
        const int64_t cut_lo = lo < 0 ? -lo : 0, cut_hi = hi < 0 ? -hi : 0;
        sz[d] = self.size(d) - cut_lo - cut_hi;
        if (sz[d] <= 0) {
            sz[d] = 0;
            interior_empty = true;
        }
        soff += cut_lo * self.stride(d);
        doff += (lo > 0 ? lo : 0) * out.stride(d);
    }
    if (out.numel() != 0) {
        if (out.numel() != (interior_empty ? 0 : c10::multiply_integers(sz))) {
            unsigned char bytes[16];
            scalar_bytes(value, self.scalar_type(), bytes);
            launch_fill(out, bytes, nullptr);
        }
        if (!interior_empty)
            launch_copy_view(self, sz, elem_ptr(out, doff), out.strides(), elem_ptr(self, soff),
                             self.strides());
    }
    tracking::record_executed("aten::constant_pad_nd");
    return out;
}

// ---------------------------------------------------------------------------
// sort / topk
// ---------------------------------------------------------------------------
void launch_sort(bool topk, const Tensor &self, int64_t dim, bool descending, int64_t k,
                 bool sorted, const Tensor &values, const Tensor &indices) {
    if (values.numel() == 0) return;
    const int64_t nd = self.dim();
    std::vector<int64_t> os, is, vs, xs;
    for (int64_t d = 0; d < nd; ++d)
        if (d != dim) {
            os.push_back(self.size(d));
            is.push_back(self.stride(d));
            vs.push_back(values.stride(d));
            xs.push_back(indices.stride(d));
        }
    trn_sort_desc s{};
    s.dtype = *native_dtype(self.scalar_type());
    s.descending = descending;
    s.outer_ndim = static_cast<int>(os.size());
    s.outer_sizes = os.data();
    s.in_outer_strides = is.data();
    s.val_outer_strides = vs.data();
    s.idx_outer_strides = xs.data();
    s.len = nd ? self.size(dim) : 1;
    s.in_stride = nd ? self.stride(dim) : 1;
    s.val_stride = nd ? values.stride(dim) : 1;
    s.idx_stride = nd ? indices.stride(dim) : 1;
    s.k = k;
    s.sorted = sorted;
    s.in = self.const_data_ptr();
    s.values = values.data_ptr();
    s.indices = indices.data_ptr<int64_t>();
    trn_stream *st = stream_of(self);
    TRN_CHECK(topk ? trn_topk_launch(st, &s) : trn_sort_launch(st, &s));
}

// Runs `launch(v, i)` on the outs, or on temporaries copied into them when
// an out shares memory with self (sort(x, out=(x, idx)) is legal): the
// kernel reads self while it writes.
template <typename F>
void with_outs(const Tensor &self, const Tensor &values, const Tensor &indices, F launch) {
    if (!out_aliases(values, self) && !out_aliases(indices, self)) {
        launch(values, indices);
        return;
    }
    Tensor v = at::empty(values.sizes(), values.options());
    Tensor i = at::empty(indices.sizes(), indices.options());
    launch(v, i);
    values.copy_(v);
    indices.copy_(i);
}

std::tuple<Tensor &, Tensor &> sort_values_stable(const Tensor &self, std::optional<bool> stable,
                                                  int64_t dim, bool descending, Tensor &values,
                                                  Tensor &indices) {
    // PyTorch's meta function with the outs (dtype, device, resize), then
    // TensorIterator's overlap rule.
    MetaShape<at::meta::structured_sort_stable> meta(&values, &indices);
    meta.meta(self, stable, dim, descending);
    check_out_overlap(values, self);
    check_out_overlap(indices, self);
    if (!sortable(self.scalar_type()))
        return fallback<at::_ops::sort_values_stable>(self, stable, dim, descending, values,
                                                      indices);
    const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
    with_outs(self, values, indices, [&](const Tensor &v, const Tensor &i) {
        launch_sort(false, self, d, descending, self.dim() ? self.size(d) : 1, true, v, i);
    });
    tracking::record_executed("aten::sort");
    return {values, indices};
}

std::tuple<Tensor, Tensor> sort_stable(const Tensor &self, std::optional<bool> stable, int64_t dim,
                                       bool descending) {
    if (!sortable(self.scalar_type()))
        return fallback<at::_ops::sort_stable>(self, stable, dim, descending);
    Tensor values = at::empty_like(self, at::MemoryFormat::Contiguous);
    Tensor indices = at::empty(self.sizes(), self.options().dtype(at::kLong));
    sort_values_stable(self, stable, dim, descending, values, indices);
    return {values, indices};
}

std::tuple<Tensor &, Tensor &> topk_values(const Tensor &self, int64_t k, int64_t dim, bool largest,
                                           bool sorted, Tensor &values, Tensor &indices) {
    TORCH_CHECK(self.scalar_type() != at::kBool, "topk does not support bool dtypes on neuron");
    MetaShape<at::meta::structured_topk> meta(&values, &indices);
    meta.meta(self, k, dim, largest, sorted);
    check_out_overlap(values, self);
    check_out_overlap(indices, self);
    if (!sortable(self.scalar_type()))
        return fallback<at::_ops::topk_values>(self, k, dim, largest, sorted, values, indices);
    const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
    with_outs(self, values, indices, [&](const Tensor &v, const Tensor &i) {
        launch_sort(true, self, d, largest, k, sorted, v, i);
    });
    tracking::record_executed("aten::topk");
    return {values, indices};
}

std::tuple<Tensor, Tensor> topk(const Tensor &self, int64_t k, int64_t dim, bool largest,
                                bool sorted) {
    if (!sortable(self.scalar_type()))
        return fallback<at::_ops::topk>(self, k, dim, largest, sorted);
    Tensor values = at::empty({0}, self.options());
    Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
    topk_values(self, k, dim, largest, sorted, values, indices);
    return {values, indices};
}

// ---------------------------------------------------------------------------
// unique
// ---------------------------------------------------------------------------
std::tuple<Tensor, Tensor, Tensor> run_unique(const Tensor &self, bool consecutive,
                                              bool return_inverse, bool return_counts,
                                              const char *name) {
    Tensor in = self.contiguous();
    const int64_t n = in.numel();
    Tensor values = at::empty({n}, self.options());
    Tensor inverse =
        at::empty(return_inverse ? self.sizes() : IntArrayRef{0}, self.options().dtype(at::kLong));
    Tensor counts = at::empty({return_counts ? n : 0}, self.options().dtype(at::kLong));
    int64_t nu = 0;
    if (n > 0) {
        trn_unique_desc d{};
        d.dtype = *native_dtype(self.scalar_type());
        d.consecutive = consecutive;
        d.n = n;
        d.in = in.const_data_ptr();
        d.values = values.data_ptr();
        d.inverse = return_inverse ? inverse.data_ptr<int64_t>() : nullptr;
        d.counts = return_counts ? counts.data_ptr<int64_t>() : nullptr;
        d.num_unique = &nu;
        trn_stream *st = stream_of(self);
        TRN_CHECK(trn_unique_launch(st, &d));
        TRN_CHECK(trn_stream_synchronize(st));  // the count sizes the outputs
    }
    values.resize_({nu});
    if (return_counts) counts.resize_({nu});
    tracking::record_executed(name);
    return {values, inverse, counts};
}

std::tuple<Tensor, Tensor, Tensor> unique2(const Tensor &self, bool sorted, bool return_inverse,
                                           bool return_counts) {
    if (!sortable(self.scalar_type()))
        return fallback<at::_ops::_unique2>(self, sorted, return_inverse, return_counts);
    return run_unique(self, false, return_inverse, return_counts, "aten::_unique2");
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor &self, bool return_inverse,
                                                      bool return_counts,
                                                      std::optional<int64_t> dim) {
    if (!sortable(self.scalar_type()) || (dim.has_value() && self.dim() != 1))
        return fallback<at::_ops::unique_consecutive>(self, return_inverse, return_counts, dim);
    return run_unique(self, true, return_inverse, return_counts, "aten::unique_consecutive");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
    m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
    m.impl("zero_", TORCH_FN(zero_));
    m.impl("arange.start_out", TORCH_FN(arange_out));
    m.impl("linspace.out", TORCH_FN(linspace_out));
    m.impl("eye.out", TORCH_FN(eye_out));
    m.impl("eye.m_out", TORCH_FN(eye_m_out));
    m.impl("tril", TORCH_FN(tri<false>));
    m.impl("triu", TORCH_FN(tri<true>));
    m.impl("tril.out", TORCH_FN(tri_out<false>));
    m.impl("triu.out", TORCH_FN(tri_out<true>));
    m.impl("tril_", TORCH_FN(tri_<false>));
    m.impl("triu_", TORCH_FN(tri_<true>));
    m.impl("flip", TORCH_FN(flip));
    m.impl("roll", TORCH_FN(roll));
    m.impl("constant_pad_nd", TORCH_FN(constant_pad_nd));
    m.impl("sort.stable", TORCH_FN(sort_stable));
    m.impl("sort.values_stable", TORCH_FN(sort_values_stable));
    m.impl("topk", TORCH_FN(topk));
    m.impl("topk.values", TORCH_FN(topk_values));
    m.impl("_unique2", TORCH_FN(unique2));
    m.impl("unique_consecutive", TORCH_FN(unique_consecutive));
}

}  // namespace neuron
