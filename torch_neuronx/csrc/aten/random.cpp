// aten/random.cpp - in-place random fills on neuron (uniform_, normal_,
// bernoulli_(p), exponential_, random_, log_normal_, cauchy_, geometric_), run by libtrn's counter-based
// random kernel (trn/random.h). Each call takes the generator's (seed,
// offset) (default or given) and advances the offset by the element count,
// so torch.manual_seed / torch.neuron.manual_seed reproduce the values,
// devices have independent streams, get_rng_state / set_rng_state
// round-trip, and DTensor's offset-based RNG tracker gives each shard its
// part of the global tensor. Argument checks and
// messages follow ATen's; dtypes the kernel does not cover go to the CPU
// fallback. randn / rand / randint / rand_like / nn.init are built on these.
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/DistributionTemplates.h>
#include <torch/library.h>

#include <limits>

#include "fallback/cpu_fallback.h"
#include "runtime/generator.h"
#include "runtime/device.h"
#include "observe/op_tracking.h"
#include "trn/random.h"

namespace neuron {
namespace {

using at::Tensor;

bool is_float_dtype(const Tensor &t) {
    const auto s = t.scalar_type();
    return s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16;
}

// Fills `self` (any layout: a contiguous staging tensor when needed).
Tensor &run(Tensor &self, trn_random_dist dist, double a, double b, int64_t from, uint64_t range,
            const std::optional<at::Generator> &gen, const char *name) {
    if (self.numel() == 0) return self;
    Tensor work = self.is_contiguous() ? self : at::empty_like(self, at::MemoryFormat::Contiguous);
    trn_random_desc d{};
    d.dist = dist;
    d.dtype = *native_dtype(self.scalar_type());
    d.n = work.numel();
    d.out = work.data_ptr();
    d.a = a;
    d.b = b;
    d.from = from;
    d.range = range;
    const CounterRange r = reserve_counters(gen, self.device().index(), static_cast<uint64_t>(d.n));
    d.seed = r.seed;
    d.offset = r.offset;
    TRN_CHECK(trn_random_launch(current_trn_stream(self.device().index()), &d));
    if (!work.is_same(self)) self.copy_(work);
    tracking::record_executed(name);
    return self;
}

// ATen's uniform_impl_ checks: both bounds finite in the dtype (NaN and
// infinities are out of bounds), from <= to, and to - from representable.
void check_uniform_bounds(const Tensor &self, double from, double to) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "uniform_", [&] {
        const auto lo = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
        const auto hi = static_cast<double>(std::numeric_limits<scalar_t>::max());
        TORCH_CHECK(from >= lo && from <= hi, "from is out of bounds for ", self.dtype());
        TORCH_CHECK(to >= lo && to <= hi, "to is out of bounds for ", self.dtype());
        TORCH_CHECK(from <= to,
                    "uniform_ expects to return a [from, to) range, but found from=", from,
                    " > to=", to);
        TORCH_CHECK((to - from) <= std::numeric_limits<scalar_t>::max(),
                    "uniform_ expects to-from <= std::numeric_limits<",
                    toString(self.scalar_type()), ">::max(), but found to=", to, " and from=", from,
                    " which result in to-from to exceed the limit");
    });
}

Tensor &uniform_(Tensor &self, double from, double to, std::optional<at::Generator> gen) {
    if (!is_float_dtype(self)) return fallback<at::_ops::uniform_>(self, from, to, gen);
    check_uniform_bounds(self, from, to);
    return run(self, TRN_RANDOM_UNIFORM, from, to, 0, 0, gen, "aten::uniform_");
}

Tensor &normal_(Tensor &self, double mean, double std, std::optional<at::Generator> gen) {
    TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
    if (!is_float_dtype(self)) return fallback<at::_ops::normal_>(self, mean, std, gen);
    return run(self, TRN_RANDOM_NORMAL, mean, std, 0, 0, gen, "aten::normal_");
}

Tensor &exponential_(Tensor &self, double lambd, std::optional<at::Generator> gen) {
    TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
    if (!is_float_dtype(self)) return fallback<at::_ops::exponential_>(self, lambd, gen);
    return run(self, TRN_RANDOM_EXPONENTIAL, lambd, 0, 0, 0, gen, "aten::exponential_");
}

Tensor &log_normal_(Tensor &self, double mean, double std, std::optional<at::Generator> gen) {
    TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
    if (!is_float_dtype(self)) return fallback<at::_ops::log_normal_>(self, mean, std, gen);
    return run(self, TRN_RANDOM_LOG_NORMAL, mean, std, 0, 0, gen, "aten::log_normal_");
}

Tensor &cauchy_(Tensor &self, double median, double sigma, std::optional<at::Generator> gen) {
    TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
    TORCH_CHECK(at::isFloatingType(self.scalar_type()),
                "Cauchy distribution is a continuous probability distribution. dtype must be a "
                "floating point but you specified ",
                self.dtype());
    if (!is_float_dtype(self)) return fallback<at::_ops::cauchy_>(self, median, sigma, gen);
    return run(self, TRN_RANDOM_CAUCHY, median, sigma, 0, 0, gen, "aten::cauchy_");
}

// Any real dtype: the number of trials (>= 1) is stored as an integer.
Tensor &geometric_(Tensor &self, double p, std::optional<at::Generator> gen) {
    TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
    // ATen has no bool geometric_: the CPU path raises its NotImplementedError.
    if (!native_dtype(self.scalar_type()) || self.is_complex() || self.scalar_type() == at::kBool)
        return fallback<at::_ops::geometric_>(self, p, gen);
    return run(self, TRN_RANDOM_GEOMETRIC, p, 0, 0, 0, gen, "aten::geometric_");
}

Tensor &bernoulli_float(Tensor &self, double p, std::optional<at::Generator> gen) {
    TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
    if (!native_dtype(self.scalar_type()) || self.is_complex())
        return fallback<at::_ops::bernoulli__float>(self, p, gen);
    return run(self, TRN_RANDOM_BERNOULLI, p, 0, 0, 0, gen, "aten::bernoulli_");
}

// Values random_() may produce without `to`: [0, 2^mantissa digits] for
// floating types, [0, max] for integers, as ATen.
uint64_t default_range(at::ScalarType s) {
    switch (s) {
    case at::kFloat: return (UINT64_C(1) << 24) + 1;
    case at::kDouble: return (UINT64_C(1) << 53) + 1;
    case at::kHalf: return (UINT64_C(1) << 11) + 1;
    case at::kBFloat16: return (UINT64_C(1) << 8) + 1;
    case at::kBool: return 2;
    case at::kByte: return 256;
    case at::kChar: return 128;
    case at::kShort: return UINT64_C(1) << 15;
    case at::kInt: return UINT64_C(1) << 31;
    case at::kLong: return UINT64_C(1) << 63;
    default: return 0;
    }
}

bool random_ok(const Tensor &self) {
    return native_dtype(self.scalar_type()).has_value() && default_range(self.scalar_type()) != 0;
}

Tensor &random_from(Tensor &self, int64_t from, std::optional<int64_t> to,
                    std::optional<at::Generator> gen) {
    if (!random_ok(self) || !to.has_value())
        return fallback<at::_ops::random__from>(self, from, to, gen);
    // ATen's random_from_to_impl: for floating dtypes the bounds move to
    // values the dtype holds, then both must lie in the dtype's range.
    int64_t to_ex = *to;
    TORCH_CHECK(from < to_ex, "random_ expects 'from' to be less than 'to', but got from=", from,
                " >= to=", to_ex);
    if (at::isFloatingType(self.scalar_type())) {
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, self.scalar_type(), "random_", [&] {
                from = at::native::templates::update_from<scalar_t>(from);
                to_ex = at::native::templates::update_to<scalar_t>(to_ex);
                TORCH_CHECK(from < to_ex,
                            "random_ expects 'from' casted to dtype to be less than 'to' "
                            "casted to dtype, but got from=",
                            from, " >= to=", to_ex);
            });
    }
    at::native::templates::check_from_to_in_range(from, to_ex - 1, self.dtype());
    const uint64_t range = static_cast<uint64_t>(to_ex) - static_cast<uint64_t>(from);
    return run(self, TRN_RANDOM_INTEGER, 0, 0, from, range, gen, "aten::random_");
}

Tensor &random_to(Tensor &self, int64_t to, std::optional<at::Generator> gen) {
    if (!random_ok(self)) return fallback<at::_ops::random__to>(self, to, gen);
    TORCH_CHECK(0 < to, "random_ expects 'from' to be less than 'to', but got from=0 >= to=", to);
    int64_t from = 0;
    if (at::isFloatingType(self.scalar_type())) {
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, self.scalar_type(), "random_", [&] {
                from = at::native::templates::update_from<scalar_t>(from);
                to = at::native::templates::update_to<scalar_t>(to);
                TORCH_CHECK(from < to,
                            "random_ expects 'from' casted to dtype to be less than 'to' "
                            "casted to dtype, but got from=",
                            from, " >= to=", to);
            });
    }
    at::native::templates::check_from_to_in_range(from, to - 1, self.dtype());
    return run(self, TRN_RANDOM_INTEGER, 0, 0, 0, static_cast<uint64_t>(to), gen, "aten::random_");
}

Tensor &random_default(Tensor &self, std::optional<at::Generator> gen) {
    if (!random_ok(self)) return fallback<at::_ops::random_>(self, gen);
    return run(self, TRN_RANDOM_INTEGER, 0, 0, 0, default_range(self.scalar_type()), gen,
               "aten::random_");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("uniform_", TORCH_FN(uniform_));
    m.impl("normal_", TORCH_FN(normal_));
    m.impl("exponential_", TORCH_FN(exponential_));
    m.impl("bernoulli_.float", TORCH_FN(bernoulli_float));
    m.impl("log_normal_", TORCH_FN(log_normal_));
    m.impl("cauchy_", TORCH_FN(cauchy_));
    m.impl("geometric_", TORCH_FN(geometric_));
    m.impl("random_.from", TORCH_FN(random_from));
    m.impl("random_.to", TORCH_FN(random_to));
    m.impl("random_", TORCH_FN(random_default));
}

}  // namespace neuron
