// aten/sample.cpp - random sampling on neuron from the per-device
// generator: randperm and multinomial (libtrn's trn/sample.h kernels), and
// the tensor-parameter forms of normal and bernoulli_, composed of the native
// random fills (aten/random.cpp) and native elementwise ops as ATen's own
// kernels compose them. Every seed is one 64-bit draw from the device's
// generator (default or given), so torch.manual_seed reproduces results,
// devices are independent, and get_rng_state / set_rng_state round-trip.
// Argument checks and messages follow PyTorch CPU; unsupported dtypes go to
// the CPU fallback.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "aten/meta.h"
#include "fallback/cpu_fallback.h"
#include "runtime/generator.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/sample.h"

namespace neuron {
namespace {

using at::Tensor;

trn_stream *stream_of(const Tensor &t) { return current_trn_stream(t.device().index()); }

bool is_float(at::ScalarType s) {
    return s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16;
}

// ---- randperm -------------------------------------------------------------------

// The largest n whose values 0 .. n-1 the dtype holds exactly (PyTorch's
// limit for the floating types it checks), or -1 when unsupported.
int64_t randperm_limit(at::ScalarType s) {
    switch (s) {
    case at::kHalf: return (INT64_C(1) << 11) + 1;
    case at::kBFloat16: return (INT64_C(1) << 8) + 1;
    case at::kFloat: return (INT64_C(1) << 24) + 1;
    case at::kDouble: return (INT64_C(1) << 53) + 1;
    case at::kByte: return INT64_C(256);
    case at::kChar: return INT64_C(128);
    case at::kShort: return INT64_C(1) << 15;
    case at::kInt: return INT64_C(1) << 31;
    case at::kLong: return std::numeric_limits<int64_t>::max();
    default: return -1;
    }
}

Tensor &randperm_out(int64_t n, std::optional<at::Generator> gen, Tensor &out) {
    const int64_t limit = randperm_limit(out.scalar_type());
    if (limit < 0) return fallback<at::_ops::randperm_generator_out>(n, gen, out);
    TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
    TORCH_CHECK(n <= limit, "n cannot be greater than ",
                out.scalar_type() == at::kFloat ? std::string("2^24+1") : std::to_string(limit),
                " for ", out.scalar_type(), " type.");
    at::native::resize_output(out, {n});
    check_out_overlap(out);
    if (n == 0) return out;
    Tensor work = out.is_contiguous() ? out : at::empty({n}, out.options());
    trn_randperm_desc d{};
    d.dtype = *native_dtype(out.scalar_type());
    d.n = n;
    d.out = work.data_ptr();
    d.seed = draw_key(gen, out.device().index());
    TRN_CHECK(trn_randperm_launch(stream_of(out), &d));
    if (!work.is_same(out)) out.copy_(work);
    tracking::record_executed("aten::randperm");
    return out;
}

// ---- multinomial ------------------------------------------------------------------

void multinomial_check(const Tensor &self, int64_t n_sample, bool replacement) {
    TORCH_CHECK(
        at::isFloatingType(self.scalar_type()),
        "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
    TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
    const int64_t n_cat = self.size(-1);
    TORCH_CHECK(replacement || n_sample <= n_cat,
                "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    TORCH_CHECK(n_cat <= (INT64_C(1) << 24), "number of categories cannot exceed 2^24");
    if (self.numel() == 0) return;
    // As CPU: finite, non-negative weights and no row summing to zero (one
    // host read of two flags computed on the device).
    const Tensor bad_value =
        self.max().ge(INFINITY).logical_or(self.min().lt(0)).logical_or(self.isnan().any());
    const Tensor zero_row = (self.dim() == 1 ? self.sum() : self.sum(1)).eq(0).any();
    const Tensor flags = at::stack({bad_value, zero_row}).cpu();
    TORCH_CHECK(!flags[0].item<bool>(),
                "probability tensor contains either `inf`, `nan` or element < 0");
    TORCH_CHECK(!flags[1].item<bool>(),
                "invalid multinomial distribution (sum of probabilities <= 0)");
}

Tensor multinomial_draw(const Tensor &self, int64_t n_sample, bool replacement,
                        std::optional<at::Generator> gen) {
    if (!is_float(self.scalar_type()))
        return fallback<at::_ops::multinomial>(self, n_sample, replacement, gen);
    multinomial_check(self, n_sample, replacement);
    const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
    Tensor out = self.dim() == 1 ? at::empty({n_sample}, self.options().dtype(at::kLong))
                                 : at::empty({rows, n_sample}, self.options().dtype(at::kLong));
    if (out.numel() == 0) return out;
    const Tensor p = self.contiguous();
    trn_multinomial_desc d{};
    d.dtype = *native_dtype(self.scalar_type());
    d.rows = rows;
    d.categories = self.size(-1);
    d.samples = n_sample;
    d.replacement = replacement;
    d.probs = p.data_ptr();
    d.out = out.data_ptr<int64_t>();
    d.seed = draw_key(gen, self.device().index());
    TRN_CHECK(trn_multinomial_launch(stream_of(self), &d));
    tracking::record_executed("aten::multinomial");
    return out;
}

Tensor &multinomial_out(const Tensor &self, int64_t n_sample, bool replacement,
                        std::optional<at::Generator> gen, Tensor &out) {
    if (!is_float(self.scalar_type()) || out.scalar_type() != at::kLong)
        return fallback<at::_ops::multinomial_out>(self, n_sample, replacement, gen, out);
    check_out_device(out, self.device());
    const Tensor r = multinomial_draw(self, n_sample, replacement, gen);
    at::native::resize_output(out, r.sizes());
    check_out_overlap(out, self);
    out.copy_(r);
    return out;
}

// ---- normal / bernoulli with tensor parameters ---------------------------------------

void check_std(const Tensor &std) {
    TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
    TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(),
                "normal expects all elements of std >= 0.0");
}

Tensor normal_tt(const Tensor &mean, const Tensor &std, std::optional<at::Generator> gen) {
    if (!is_float(mean.scalar_type()) || !is_float(std.scalar_type()))
        return fallback<at::_ops::normal_Tensor_Tensor>(mean, std, gen);
    check_std(std);
    Tensor out = at::empty(at::infer_size(mean.sizes(), std.sizes()), mean.options());
    out.normal_(0, 1, gen);
    out.mul_(std).add_(mean);
    tracking::record_executed("aten::normal");
    return out;
}

Tensor normal_tf(const Tensor &mean, double std, std::optional<at::Generator> gen) {
    if (!is_float(mean.scalar_type()))
        return fallback<at::_ops::normal_Tensor_float>(mean, std, gen);
    TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
    Tensor out = at::empty_like(mean, at::MemoryFormat::Contiguous);
    out.normal_(0, std, gen);
    out.add_(mean);
    tracking::record_executed("aten::normal");
    return out;
}

Tensor normal_ft(double mean, const Tensor &std, std::optional<at::Generator> gen) {
    if (!is_float(std.scalar_type()))
        return fallback<at::_ops::normal_float_Tensor>(mean, std, gen);
    check_std(std);
    Tensor out = at::empty_like(std, at::MemoryFormat::Contiguous);
    out.normal_(0, 1, gen);
    out.mul_(std).add_(mean);
    tracking::record_executed("aten::normal");
    return out;
}

// self[i] = 1 with probability p[i] (p broadcast to self), as CPU: a double
// uniform draw compared with p.
Tensor &bernoulli_tensor(Tensor &self, const Tensor &p, std::optional<at::Generator> gen) {
    if (!is_float(p.scalar_type()) || !native_dtype(self.scalar_type()) || self.is_complex())
        return fallback<at::_ops::bernoulli__Tensor>(self, p, gen);
    const Tensor pe = p.expand(self.sizes());  // CPU's expand_inplace errors
    if (self.numel() == 0) return self;
    TORCH_CHECK(p.ge(0).logical_and(p.le(1)).all().item<bool>(),
                "Expected p_in >= 0 && p_in <= 1 to be true, but got false.");
    Tensor u = at::empty(self.sizes(), self.options().dtype(at::kDouble));
    u.uniform_(0, 1, gen);
    self.copy_(u.lt(pe));
    tracking::record_executed("aten::bernoulli_");
    return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("randperm.generator_out", TORCH_FN(randperm_out));
    m.impl("multinomial", TORCH_FN(multinomial_draw));
    m.impl("multinomial.out", TORCH_FN(multinomial_out));
    m.impl("normal.Tensor_Tensor", TORCH_FN(normal_tt));
    m.impl("normal.Tensor_float", TORCH_FN(normal_tf));
    m.impl("normal.float_Tensor", TORCH_FN(normal_ft));
    m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor));
}

}  // namespace
}  // namespace neuron
