// aten/special_poly.cpp - the orthogonal polynomials whose CPU kernel reads an
// unset value (special.chebyshev_polynomial_u / _w, shifted_chebyshev_
// polynomial_u / _w, laguerre_polynomial_l, legendre_polynomial_p): they run
// on the CPU through the fallback, as before, and their NaN lanes are then
// set to NaN. PyTorch's recurrence for these stops as soon as its running
// value is NaN and returns a local it has not yet assigned when x is NaN and
// n >= 2: a value that changes from call to call (-2.7e36, 4.2e-45, 0.0 seen
// for the same input), so neuron returned garbage too. The polynomial of NaN
// is NaN (CPU's own answer for n == 1, and for T, V, H, He at every n). The
// other lanes are CPU's values.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include <limits>

#include "fallback/cpu_fallback.h"

namespace neuron {
namespace {

// NaN where x is NaN and n >= 2 (n is truncated to an integer by the kernel).
void set_nan_lanes(const at::Tensor &x, const at::Tensor &n, at::Tensor &out) {
    if (!out.is_floating_point() || !x.is_floating_point() || out.numel() == 0) return;
    const at::Tensor xd = x.to(out.device()), nd = n.to(out.device());
    const at::Tensor lanes = at::logical_and(at::isnan(xd), at::ge(nd, 2));
    out.masked_fill_(lanes, std::numeric_limits<double>::quiet_NaN());
}

template <typename FnOp, typename OutOp> struct Poly {
    static at::Tensor fn(const at::Tensor &x, const at::Tensor &n) {
        at::Tensor out = fallback<FnOp>(x, n);
        set_nan_lanes(x, n, out);
        return out;
    }
    static at::Tensor &out(const at::Tensor &x, const at::Tensor &n, at::Tensor &result) {
        fallback<OutOp>(x, n, result);
        set_nan_lanes(x, n, result);
        return result;
    }
};

#define NEURON_POLY(NAME)                                                                          \
    {                                                                                              \
        using P = Poly<at::_ops::NAME, at::_ops::NAME##_out>;                                      \
        m.impl(#NAME, TORCH_FN(P::fn));                                                            \
        m.impl(#NAME ".out", TORCH_FN(P::out));                                                    \
    }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    NEURON_POLY(special_chebyshev_polynomial_u)
    NEURON_POLY(special_chebyshev_polynomial_w)
    NEURON_POLY(special_shifted_chebyshev_polynomial_u)
    NEURON_POLY(special_shifted_chebyshev_polynomial_w)
    NEURON_POLY(special_laguerre_polynomial_l)
    NEURON_POLY(special_legendre_polynomial_p)
}

}  // namespace
}  // namespace neuron
