"""An NKI RMSNorm kernel body, written here, undecorated: y = x *
rsqrt(mean(x^2, -1) + eps) * w, 128 rows per tile. One definition for the
tests that jit it (kernels_rmsnorm.py as a custom op, test_nki_fusion.py in
both fusion modes) and bench/bench_nki.py."""

import nki.isa as nisa
import nki.language as nl


def rmsnorm(x, w, eps):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    F = x.shape[1]
    wt = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wt, src=w.reshape((1, F)).broadcast_to((128, F)))
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[nl.ds(i * 128, 128), :])
        sq = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=t, reduce_op=nl.add, reduce_res=ss)
        rs = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=rs, data=ss, op0=nl.multiply, operand0=1.0 / F, op1=nl.add, operand1=eps
        )
        nisa.activation(dst=rs, op=nl.rsqrt, data=rs)
        nisa.scalar_tensor_tensor(
            dst=t, data=t, op0=nl.multiply, operand0=rs, op1=nl.multiply, operand1=wt
        )
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t)
    return out
