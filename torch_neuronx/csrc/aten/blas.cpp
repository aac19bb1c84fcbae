// aten/blas.cpp - matrix products on neuron, run by libtrn's matmul kernel
// (trn/blas.h): mm, bmm, addmm, baddbmm, addbmm, mv, addmv, dot, vdot, with
// their out= and in-place forms. matmul and linear are
// CompositeImplicitAutograd and reach these through PyTorch's own
// decomposition.
//
// Argument checking, output shape and dtype come from PyTorch itself: each op
// is first run on meta tensors of the same sizes/strides/dtypes (the
// structured meta functions every backend shares), so errors read as on
// CUDA. Each op then maps to (A, B, C, alpha, beta) launches; for the
// "add" forms self is first copied (broadcast) into the output unless beta
// is 0, in which case the output is written without being read, as on CPU.
// Dtypes the kernel lacks (complex, bool, unsigned > 8 bits) go to the CPU
// fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/mm_meta.h>
#include <torch/library.h>

#include <string_view>

#include <trn/matmul_bias.h>

#include "fallback/cpu_fallback.h"
#include "runtime/device.h"
#include "aten/meta.h"
#include "observe/op_tracking.h"

namespace neuron {
namespace {

using at::Scalar;
using at::Tensor;

Tensor meta_of(const Tensor &t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

bool supported(at::ScalarType type) {
    auto d = native_dtype(type);
    return d && trn_matmul_supports(*d);
}

void check_devices(const Tensor &out, std::initializer_list<const Tensor *> inputs) {
    for (const Tensor *t : inputs)
        TORCH_CHECK(t->device() == out.device(),
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, ",
                    out.device(), " and ", t->device(), "!");
}

// A batch of matrices: sizes and element strides of (batch, rows, cols).
struct Mat {
    int64_t batch, rows, cols;
    int64_t s[3];
    void *ptr;
    uint64_t version = 0;  // trn_matmul_desc's b_version where it is B
};

// The tensor's version counter + 1 (every in-place write moves it): lets
// libtrn keep a packed copy of a weight between decode steps. 0 (never
// cached): inference tensors, which have no counter, and a weight that
// requires grad in a product recorded for autograd. A training loop is where
// weights are written through `.data` (manual SGD, as PyTorch's own
// tutorials do), which has its own counter: w's never moves, and only the
// cache's sampled elements would see the write. Decoding runs under no_grad.
uint64_t version_of(const Tensor &t) {
    if (t.is_inference() || (t.requires_grad() && at::GradMode::is_enabled())) return 0;
    return static_cast<uint64_t>(t._version()) + 1;
}

Mat mat3(const Tensor &t) {  // 3-d
    return {t.size(0), t.size(1), t.size(2), {t.stride(0), t.stride(1), t.stride(2)}, t.data_ptr()};
}
Mat mat2(const Tensor &t) {  // 2-d
    return {1, t.size(0), t.size(1), {0, t.stride(0), t.stride(1)}, t.data_ptr()};
}
// B of a product: the only operand whose version libtrn reads.
Mat weight3(const Tensor &t) {
    Mat m = mat3(t);
    m.version = version_of(t);
    return m;
}
Mat weight2(const Tensor &t) {
    Mat m = mat2(t);
    m.version = version_of(t);
    return m;
}
Mat col(const Tensor &v) {  // 1-d as (n, 1)
    return {1, v.size(0), 1, {0, v.stride(0), 1}, v.data_ptr()};
}
Mat row(const Tensor &v) {  // 1-d as (1, n)
    return {1, 1, v.size(0), {0, 1, v.stride(0)}, v.data_ptr()};
}
Mat scalar_mat(const Tensor &t) { return {1, 1, 1, {0, 1, 1}, t.data_ptr()}; }

bool is_zero(const Scalar &s) { return s.equal(0); }

// C = alpha * A @ B + beta * C (+ the row `bias`, with beta 0) on the current
// stream of C's device.
void launch(at::ScalarType type, const Mat &c, const Mat &a, const Mat &b, int64_t k,
            const Scalar &alpha, const Scalar &beta, c10::DeviceIndex device,
            const Tensor *bias = nullptr) {
    trn_matmul_desc d{};
    d.dtype = *native_dtype(type);
    d.batch = c.batch;
    d.m = c.rows;
    d.n = c.cols;
    d.k = k;
    d.a = a.ptr;
    d.b = b.ptr;
    d.c = c.ptr;
    d.b_version = b.version;
    for (int i = 0; i < 3; ++i) {
        d.a_strides[i] = a.s[i];
        d.b_strides[i] = b.s[i];
        d.c_strides[i] = c.s[i];
    }
    if (at::isFloatingType(type)) {
        d.alpha = alpha.toDouble();
        d.beta = beta.toDouble();
    } else {
        d.alpha_int = alpha.toLong();
        d.beta_int = beta.toLong();
        d.alpha = static_cast<double>(d.alpha_int);
        d.beta = static_cast<double>(d.beta_int);
    }
    if (bias)
        TRN_CHECK(trn_matmul_bias_launch(current_trn_stream(device), &d, bias->data_ptr(),
                                         bias->stride(0)));
    else
        TRN_CHECK(trn_matmul_launch(current_trn_stream(device), &d));
}

// out <- self broadcast to out's shape (same dtype), through the copy kernel.
void copy_broadcast(const Tensor &out, const Tensor &self) {
    if (out.numel() == 0 || out.is_same(self)) return;
    TORCH_CHECK(self.scalar_type() == out.scalar_type(), "self and out must have the same dtype");
    Tensor src = self.expand(out.sizes());
    trn_copy_desc c{};
    c.ndim = static_cast<int>(out.dim());
    c.sizes = out.sizes().data();
    c.dst = out.data_ptr();
    c.dst_strides = out.strides().data();
    c.dst_dtype = *native_dtype(out.scalar_type());
    c.src = src.data_ptr();
    c.src_strides = src.strides().data();
    c.src_dtype = c.dst_dtype;
    TRN_CHECK(trn_copy_launch(current_trn_stream(out.device().index()), &c));
}

// Prepares `out` (shape/dtype from the meta result) for an out= call.
void prepare_out(Tensor &out, const Tensor &meta, at::Device device) {
    check_out(out, meta.scalar_type(), device);
    at::native::resize_output(out, meta.sizes());
}

// TensorIterator's overlap rule for out= (CPU's BLAS forms check it only
// partly), and whether out is the memory of an input. The kernel cannot
// write C while it reads A or B, and the "add" forms copy self into out
// first: out = self is in place, as addmm_; out = another input's memory
// computes into a temporary.
template <typename... In>
bool out_needs_temp(const Tensor &out, const Tensor &self, const In &...inputs) {
    check_out_overlap(out, self, inputs...);
    return out_aliases(out, inputs...) ||
           (out_aliases(out, self) &&
            !(out.data_ptr() == self.data_ptr() && out.sizes() == self.sizes() &&
              out.strides() == self.strides()));
}

// Runs `into(target)` on out, or on a temporary copied into out.
template <typename F> void into_out(Tensor &out, bool temp, F into) {
    if (!temp) {
        into(out);
        return;
    }
    Tensor tmp = at::empty(out.sizes(), out.options());
    into(tmp);
    out.copy_(tmp);
}

// ---- per-op kernels on a prepared output --------------------------------------------

// Whether self, broadcast into out, can be the kernel's bias row instead of
// a copy into out that the product then reads back: nn.Linear's addmm (a 1-d
// bias of out's columns, beta 1) into an output it does not overlap.
bool self_as_bias(const Tensor &out, const Tensor &self, const Scalar &beta) {
    return self.dim() == 1 && out.dim() == 2 && self.size(0) == out.size(1) &&
           self.scalar_type() == out.scalar_type() && beta.equal(1) &&
           !self.storage().is_alias_of(out.storage());
}

// out (m, n) = beta * self + alpha * m1 @ m2; self already in out when aliased.
void addmm_into(Tensor &out, const Tensor &self, const Tensor &m1, const Tensor &m2,
                const Scalar &beta, const Scalar &alpha) {
    check_devices(out, {&self, &m1, &m2});
    // CPU expands self to out's shape whatever beta and sizes (a zero-size
    // product included): a self that does not broadcast raises expand's error.
    if (!out.is_same(self)) (void)self.expand(out.sizes());
    if (out.numel() != 0 && self_as_bias(out, self, beta)) {
        launch(out.scalar_type(), mat2(out), mat2(m1), weight2(m2), m1.size(1), alpha, 0,
               out.device().index(), &self);
        return;
    }
    const bool use_c = !is_zero(beta);
    if (use_c) copy_broadcast(out, self);
    launch(out.scalar_type(), mat2(out), mat2(m1), weight2(m2), m1.size(1), alpha,
           use_c ? beta : Scalar(0), out.device().index());
}

void baddbmm_into(Tensor &out, const Tensor &self, const Tensor &b1, const Tensor &b2,
                  const Scalar &beta, const Scalar &alpha) {
    check_devices(out, {&self, &b1, &b2});
    const bool use_c = !is_zero(beta);
    if (use_c) copy_broadcast(out, self);
    launch(out.scalar_type(), mat3(out), mat3(b1), weight3(b2), b1.size(2), alpha,
           use_c ? beta : Scalar(0), out.device().index());
}

// out (m, n) = beta * self + alpha * sum_i b1[i] @ b2[i]: one launch per batch
// entry accumulating into out (beta = 1 after the first).
void addbmm_into(Tensor &out, const Tensor &self, const Tensor &b1, const Tensor &b2,
                 const Scalar &beta, const Scalar &alpha) {
    check_devices(out, {&self, &b1, &b2});
    const bool use_c = !is_zero(beta);
    if (use_c) copy_broadcast(out, self);
    const auto dev = out.device().index();
    const int64_t batches = b1.size(0);
    Scalar first_beta = use_c ? beta : Scalar(0);
    if (batches == 0) {
        launch(out.scalar_type(), mat2(out), mat2(out), mat2(out), 0, alpha, first_beta, dev);
        return;
    }
    for (int64_t i = 0; i < batches; ++i)
        launch(out.scalar_type(), mat2(out), mat2(b1.select(0, i)), weight2(b2.select(0, i)),
               b1.size(2), alpha, i == 0 ? first_beta : Scalar(1), dev);
}

void addmv_into(Tensor &out, const Tensor &self, const Tensor &mat, const Tensor &vec,
                const Scalar &beta, const Scalar &alpha) {
    check_devices(out, {&self, &mat, &vec});
    const bool use_c = !is_zero(beta);
    if (use_c) copy_broadcast(out, self);
    launch(out.scalar_type(), col(out), mat2(mat), col(vec), mat.size(1), alpha,
           use_c ? beta : Scalar(0), out.device().index());
}

void dot_into(Tensor &out, const Tensor &a, const Tensor &b) {
    check_devices(out, {&a, &b});
    launch(out.scalar_type(), scalar_mat(out), row(a), col(b), a.size(0), 1, 0,
           out.device().index());
}

// ---- ATen entry points ------------------------------------------------------------------

// CPU's wording for the most common mistake (the meta function words it
// differently).
// Mixed dtypes raise as on CPU (the shared meta functions let some through).
void check_dtypes(const Tensor &a, const Tensor &b, const Tensor *self = nullptr) {
    TORCH_CHECK(a.scalar_type() == b.scalar_type(),
                "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
                " != ", b.dtype());
    if (self)
        TORCH_CHECK(self->scalar_type() == a.scalar_type(),
                    "self and mat2 must have the same dtype, but got ", self->scalar_type(),
                    " and ", a.scalar_type());
}

void check_mm_shapes(const Tensor &a, const Tensor &b) {
    check_dtypes(a, b);
    if (a.dim() == 2 && b.dim() == 2)
        TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (",
                    a.size(0), "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
}

#define RECORD(name) tracking::record_executed("aten::" name)

Tensor mm(const Tensor &a, const Tensor &b) {
    check_mm_shapes(a, b);
    MetaShape<at::meta::structured_mm> meta;
    meta.meta(a, b);
    if (!supported(meta.dtype(0))) return fallback<at::_ops::mm>(a, b);
    Tensor out = meta.output(0);
    addmm_into(out, out, a, b, 0, 1);
    RECORD("mm");
    return out;
}

Tensor &mm_out(const Tensor &a, const Tensor &b, Tensor &out) {
    check_mm_shapes(a, b);
    MetaShape<at::meta::structured_mm> meta(&out);  // checks the dtype, resizes
    meta.meta(a, b);
    const bool temp = out_needs_temp(out, out, a, b);
    if (!supported(meta.dtype(0))) return fallback<at::_ops::mm_out>(a, b, out);
    into_out(out, temp, [&](Tensor &o) { addmm_into(o, o, a, b, 0, 1); });
    RECORD("mm");
    return out;
}

Tensor bmm(const Tensor &a, const Tensor &b) {
    check_dtypes(a, b);
    MetaShape<at::meta::structured_bmm> meta;
    meta.meta(a, b);
    if (!supported(meta.dtype(0))) return fallback<at::_ops::bmm>(a, b);
    Tensor out = meta.output(0);
    baddbmm_into(out, out, a, b, 0, 1);
    RECORD("bmm");
    return out;
}

Tensor &bmm_out(const Tensor &a, const Tensor &b, Tensor &out) {
    check_dtypes(a, b);
    MetaShape<at::meta::structured_bmm> meta(&out);  // checks the dtype, resizes
    meta.meta(a, b);
    const bool temp = out_needs_temp(out, out, a, b);
    if (!supported(meta.dtype(0))) return fallback<at::_ops::bmm_out>(a, b, out);
    into_out(out, temp, [&](Tensor &o) { baddbmm_into(o, o, a, b, 0, 1); });
    RECORD("bmm");
    return out;
}

// Output shape and dtype of the "add" forms: PyTorch's C++ structured meta
// function where the op has one (cheap), else the op on meta tensors.
// Returns the result dtype and, without `out`, the allocated result; `out`
// is checked and resized.
template <typename S> struct AddMeta {
    static std::pair<at::ScalarType, Tensor> of(const Tensor &self, const Tensor &x,
                                                const Tensor &y, const Scalar &beta,
                                                const Scalar &alpha, Tensor *out = nullptr) {
        MetaShape<S> m(out);
        m.meta(self, x, y, beta, alpha);
        return {m.dtype(0), m.output(0)};
    }
};
struct NoStructured {};
template <> struct AddMeta<NoStructured> {
    static std::pair<at::ScalarType, Tensor> of(const Tensor &self, const Tensor &x,
                                                const Tensor &y, const Scalar &beta,
                                                const Scalar &alpha, Tensor *out = nullptr) {
        Tensor m = at::addbmm(meta_of(self), meta_of(x), meta_of(y), beta, alpha);
        if (out == nullptr) return {m.scalar_type(), at::empty(m.sizes(), self.options())};
        // CPU's addbmm_out writes through addmm_, whose check names the dtypes so.
        TORCH_CHECK(out->scalar_type() == m.scalar_type(),
                    "self and mat2 must have the same dtype, but got ", out->scalar_type(), " and ",
                    m.scalar_type());
        prepare_out(*out, m, self.device());
        return {m.scalar_type(), Tensor()};
    }
};

// In-place forms (addmm_, baddbmm_, addmv_): the structured meta function
// with self as its output, and the checks PyTorch's generated in-place
// wrappers make (check_inplace: same dtype, device and sizes, with their
// wording). Running the op on meta tensors instead reached a Python meta
// registration: addmm_ of 64 x 64 cost 418 us of host time, addmm 9 us.
template <typename S> struct InplaceMeta final : S {
    explicit InplaceMeta(const Tensor &self) : self_(self) {}
    void set_output_strided(int64_t, at::IntArrayRef sizes, at::IntArrayRef,
                            at::TensorOptions options) override {
        check(sizes, options);
    }
    void set_output_raw_strided(int64_t, at::IntArrayRef sizes, at::IntArrayRef,
                                at::TensorOptions options) override {
        check(sizes, options);
    }
    const Tensor &maybe_get_output(int64_t) override { return self_; }

    static void of(const Tensor &self, const Tensor &x, const Tensor &y, const Scalar &beta,
                   const Scalar &alpha) {
        InplaceMeta m(self);
        m.meta(self, x, y, beta, alpha);
    }

private:
    void check(at::IntArrayRef sizes, const at::TensorOptions &options) const {
        TORCH_CHECK(options.dtype() == self_.dtype(), "Bad in-place call: input tensor dtype ",
                    self_.dtype(), " and output tensor dtype ", options.dtype(), " should match");
        TORCH_CHECK(options.device() == self_.device(), "Bad in-place call: input tensor device ",
                    self_.device(), " and output tensor device ", options.device(),
                    " should match");
        TORCH_CHECK(sizes == self_.sizes(), "Bad in-place call: input tensor size ", self_.sizes(),
                    " and output tensor size ", sizes, " should match");
    }
    const Tensor &self_;
};
// addbmm has no structured meta function: its in-place form runs on meta
// tensors.
template <> struct InplaceMeta<NoStructured> {
    static void of(const Tensor &self, const Tensor &x, const Tensor &y, const Scalar &beta,
                   const Scalar &alpha) {
        meta_of(self).addbmm_(meta_of(x), meta_of(y), beta, alpha);
    }
};

// The four "add" families share one shape: functional, out=, in-place.
#define ADD_FAMILY(NAME, INTO, S)                                                                  \
    Tensor NAME(const Tensor &self, const Tensor &x, const Tensor &y, const Scalar &beta,          \
                const Scalar &alpha) {                                                             \
        if (std::string_view(#NAME) == "addmm") check_mm_shapes(x, y);                             \
        check_dtypes(x, y, &self);                                                                 \
        auto [mtype, out] = AddMeta<S>::of(self, x, y, beta, alpha);                               \
        if (!supported(mtype)) return fallback<at::_ops::NAME>(self, x, y, beta, alpha);           \
        INTO(out, self, x, y, beta, alpha);                                                        \
        RECORD(#NAME);                                                                             \
        return out;                                                                                \
    }                                                                                              \
    Tensor &NAME##_out(const Tensor &self, const Tensor &x, const Tensor &y, const Scalar &beta,   \
                       const Scalar &alpha, Tensor &out) {                                         \
        check_dtypes(x, y, &self);                                                                 \
        /* before the meta function: baddbmm's copies self into out */                             \
        if (out_needs_temp(out, self, x, y)) {                                                     \
            /* out is an input's memory: the functional result, copied in */                       \
            Tensor r = neuron::NAME(self, x, y, beta, alpha);                                      \
            check_out(out, r.scalar_type(), self.device());                                        \
            at::native::resize_output(out, r.sizes());                                             \
            return out.copy_(r);                                                                   \
        }                                                                                          \
        const at::ScalarType mtype = AddMeta<S>::of(self, x, y, beta, alpha, &out).first;          \
        check_out_overlap(out, self, x, y); /* again: out may have been resized */                 \
        if (!supported(mtype))                                                                     \
            return fallback<at::_ops::NAME##_out>(self, x, y, beta, alpha, out);                   \
        INTO(out, self, x, y, beta, alpha);                                                        \
        RECORD(#NAME);                                                                             \
        return out;                                                                                \
    }                                                                                              \
    Tensor &NAME##_(Tensor &self, const Tensor &x, const Tensor &y, const Scalar &beta,            \
                    const Scalar &alpha) {                                                         \
        check_dtypes(x, y, &self);                                                                 \
        InplaceMeta<S>::of(self, x, y, beta, alpha);                                               \
        if (!supported(self.scalar_type()))                                                        \
            return fallback<at::_ops::NAME##_>(self, x, y, beta, alpha);                           \
        INTO(self, self, x, y, beta, alpha);                                                       \
        RECORD(#NAME "_");                                                                         \
        return self;                                                                               \
    }

ADD_FAMILY(addmm, addmm_into, at::meta::structured_addmm)
ADD_FAMILY(baddbmm, baddbmm_into, at::meta::structured_baddbmm)
ADD_FAMILY(addbmm, addbmm_into, NoStructured)
ADD_FAMILY(addmv, addmv_into, at::meta::structured_addmv)

Tensor mv(const Tensor &mat, const Tensor &vec) {
    check_dtypes(mat, vec);
    // As PyTorch's mv: an output of mat.size(0), then addmv_'s checks.
    Tensor out = at::empty({mat.size(0)}, vec.options());
    MetaShape<at::meta::structured_addmv> meta(&out);
    meta.meta(out, mat, vec, 0, 1);
    if (!supported(meta.dtype(0))) return fallback<at::_ops::mv>(mat, vec);
    addmv_into(out, out, mat, vec, 0, 1);
    RECORD("mv");
    return out;
}

Tensor &mv_out(const Tensor &mat, const Tensor &vec, Tensor &out) {
    check_dtypes(mat, vec);
    Tensor meta = at::mv(meta_of(mat), meta_of(vec));
    prepare_out(out, meta, mat.device());
    const bool temp = out_needs_temp(out, out, mat, vec);
    if (!supported(meta.scalar_type())) return fallback<at::_ops::mv_out>(mat, vec, out);
    into_out(out, temp, [&](Tensor &o) { addmv_into(o, o, mat, vec, 0, 1); });
    RECORD("mv");
    return out;
}

// PyTorch CPU's dot_check.
void check_dot(const Tensor &a, const Tensor &b) {
    TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ",
                b.dim(), "D tensors");
    TORCH_CHECK(a.scalar_type() == b.scalar_type(),
                "dot : expected both vectors to have same dtype, but found ", a.scalar_type(),
                " and ", b.scalar_type());
    TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(),
                "] and src [", b.numel(), "] to have the same number of elements, but got ",
                a.numel(), " and ", b.numel(), " elements respectively");
}

Tensor dot(const Tensor &a, const Tensor &b) {
    check_dot(a, b);
    if (!supported(a.scalar_type())) return fallback<at::_ops::dot>(a, b);
    Tensor out = at::empty({}, a.options());
    dot_into(out, a, b);
    RECORD("dot");
    return out;
}

// Real dtypes only (conjugation is the identity); complex goes to the CPU.
Tensor vdot(const Tensor &a, const Tensor &b) {
    check_dot(a, b);
    if (!supported(a.scalar_type())) return fallback<at::_ops::vdot>(a, b);
    Tensor out = at::empty({}, a.options());
    dot_into(out, a, b);
    RECORD("vdot");
    return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("mm", TORCH_FN(mm));
    m.impl("mm.out", TORCH_FN(mm_out));
    m.impl("bmm", TORCH_FN(bmm));
    m.impl("bmm.out", TORCH_FN(bmm_out));
    m.impl("addmm", TORCH_FN(addmm));
    m.impl("addmm.out", TORCH_FN(addmm_out));
    m.impl("addmm_", TORCH_FN(addmm_));
    m.impl("baddbmm", TORCH_FN(baddbmm));
    m.impl("baddbmm.out", TORCH_FN(baddbmm_out));
    m.impl("baddbmm_", TORCH_FN(baddbmm_));
    m.impl("addbmm", TORCH_FN(addbmm));
    m.impl("addbmm.out", TORCH_FN(addbmm_out));
    m.impl("addbmm_", TORCH_FN(addbmm_));
    m.impl("addmv", TORCH_FN(addmv));
    m.impl("addmv.out", TORCH_FN(addmv_out));
    m.impl("addmv_", TORCH_FN(addmv_));
    m.impl("mv", TORCH_FN(mv));
    m.impl("mv.out", TORCH_FN(mv_out));
    m.impl("dot", TORCH_FN(dot));
    m.impl("vdot", TORCH_FN(vdot));
}

}  // namespace
}  // namespace neuron
