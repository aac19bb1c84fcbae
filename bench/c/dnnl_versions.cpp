// dnnl_versions.cpp - one oneDNN library's kernels, timed on their own
// (no libtrn): matmul 2048^3 and a 3x3 convolution, float32 and bfloat16,
// in the layouts the kernels prefer. Builds against oneDNN 2.x or 3.x
// headers (the C++ API's primitive-descriptor constructors differ), so the
// Debian package and a PyPI build can be compared on the same host:
//
//   g++ -O2 -std=c++17 bench/c/dnnl_versions.cpp -o b26 -ldnnl        # Debian 2.6
//   pip download --no-deps onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
//   (unzip both)  g++ -O2 -std=c++17 -I<devel>/include bench/c/dnnl_versions.cpp
//       -o b32 -L<lib> -l:libdnnl.so.3 -Wl,-rpath,<lib>   # PyPI 3.2
//   OMP_NUM_THREADS=1 ./b26; OMP_NUM_THREADS=1 ./b32   (alternate, best of 3)
#include <chrono>
#include <unordered_map>
#include <cstdio>
#include <vector>
#include "oneapi/dnnl/dnnl.hpp"
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
static double best_ms(primitive &p, stream &s, std::unordered_map<int, memory> &args, int reps) {
    p.execute(s, args);
    s.wait();
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        auto t = std::chrono::steady_clock::now();
        p.execute(s, args);
        s.wait();
        double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
        if (ms < best) best = ms;
    }
    return best;
}
int main() {
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    const memory::dim M = 2048, N = 2048, K = 2048;
    for (dt d : {dt::f32, dt::bf16}) {
        memory::desc a({M, K}, d, tag::ab), b({K, N}, d, tag::ab), c({M, N}, d, tag::ab);
#if DNNL_VERSION_MAJOR >= 3
        matmul::primitive_desc pd(eng, a, b, c);
#else
        matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
#endif
        matmul p(pd);
        memory ma(a, eng), mb(b, eng), mc(c, eng);
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        double ms = best_ms(p, s, args, 3);
        printf("mm 2048^3 %s: %.1f ms (%.1f GFLOP/s) impl %s\n", d == dt::f32 ? "f32 " : "bf16", ms,
               2.0 * M * N * K / ms / 1e6, pd.impl_info_str());
    }
    for (dt d : {dt::f32, dt::bf16}) {
        const memory::dim n = 8, ic = 64, oc = 64, h = 56;
        memory::desc src({n, ic, h, h}, d, tag::any), wei({oc, ic, 3, 3}, d, tag::any),
            dst({n, oc, h, h}, d, tag::any);
#if DNNL_VERSION_MAJOR >= 3
        convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference,
                                               algorithm::convolution_direct, src, wei, dst, {1, 1},
                                               {1, 1}, {1, 1});
#else
        convolution_forward::primitive_desc pd(
            convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                      src, wei, dst, {1, 1}, {1, 1}, {1, 1}),
            eng);
#endif
        convolution_forward p(pd);
        memory ms_(pd.src_desc(), eng), mw(pd.weights_desc(), eng), md(pd.dst_desc(), eng);
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, ms_}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
        double ms = best_ms(p, s, args, 3);
        const double fl = 2.0 * n * oc * ic * 9 * h * h;
        printf("conv 8x64x56x56 3x3 %s: %.1f ms (%.1f GFLOP/s) impl %s\n",
               d == dt::f32 ? "f32 " : "bf16", ms, fl / ms / 1e6, pd.impl_info_str());
    }
}
