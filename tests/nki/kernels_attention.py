"""Flash attention written in NKI (current API), our own: forward with an
online softmax over 128-key tiles (causal through affine_select), returning
the output and the row log-sum-exp; backward recomputes the probabilities
from the log-sum-exp, tile by tile."""

import nki
import nki.isa as nisa
import nki.language as nl

NEG = -3.0e38


@nki.jit
def flash_fwd(q, k, v, scale, causal):
    """q, k, v: (BH, S, D), S a multiple of 128, D <= 128. Returns
    (o (BH, S, D), lse (BH, S, 1) float32)."""
    BH, S, D = q.shape
    T = S // 128
    o = nl.ndarray((BH, S, D), q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((BH, S, 1), nl.float32, buffer=nl.shared_hbm)
    for b in nl.affine_range(BH):
        for qi in nl.affine_range(T):
            qT = nl.ndarray((D, 128), q.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=qT, src=q[b, nl.ds(qi * 128, 128), :])
            m = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=m, value=NEG)
            den = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=den, value=0.0)
            acc = nl.ndarray((128, D), nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0)
            for ki in nl.sequential_range(T):
                kT = nl.ndarray((D, 128), k.dtype, buffer=nl.sbuf)
                nisa.dma_transpose(dst=kT, src=k[b, nl.ds(ki * 128, 128), :])
                vt = nl.ndarray((128, D), v.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=vt, src=v[b, nl.ds(ki * 128, 128), :])
                s_ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=s_ps, stationary=qT, moving=kT)
                s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=s, op=nl.copy, data=s_ps, scale=scale)
                if causal:
                    # keep key j of query i where (qi*128 + i) - (ki*128 + j) >= 0
                    nisa.affine_select(
                        dst=s,
                        pattern=[[-1, 128]],
                        channel_multiplier=1,
                        on_true_tile=s,
                        on_false_value=NEG,
                        cmp_op=nl.greater_equal,
                        offset=(qi - ki) * 128,
                    )
                mt = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=mt, op=nl.maximum, data=s, axis=1)
                mnew = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=mnew, data1=m, data2=mt, op=nl.maximum)
                negm = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=negm, data=mnew, op0=nl.multiply, operand0=-1.0)
                p = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                rs = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.activation(
                    dst=p, op=nl.exp, data=s, bias=negm, reduce_op=nl.add, reduce_res=rs
                )
                corr = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=corr, op=nl.exp, data=m, bias=negm)
                nisa.scalar_tensor_tensor(
                    dst=den, data=den, op0=nl.multiply, operand0=corr, op1=nl.add, operand1=rs
                )
                nisa.tensor_scalar(dst=acc, data=acc, op0=nl.multiply, operand0=corr)
                pT_ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=pT_ps, data=p)
                pT = nl.ndarray((128, 128), v.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=pT, src=pT_ps)
                pv = nl.ndarray((128, D), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=pv, stationary=pT, moving=vt)
                nisa.tensor_tensor(dst=acc, data1=acc, data2=pv, op=nl.add)
                nisa.tensor_copy(dst=m, src=mnew)
            rden = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=rden, data=den)
            ot = nl.ndarray((128, D), q.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=ot, data=acc, op0=nl.multiply, operand0=rden)
            nisa.dma_copy(dst=o[b, nl.ds(qi * 128, 128), :], src=ot)
            lt = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=lt, op=nl.log, data=den)
            nisa.tensor_tensor(dst=lt, data1=lt, data2=m, op=nl.add)
            nisa.dma_copy(dst=lse[b, nl.ds(qi * 128, 128), :], src=lt)
    return o, lse


@nki.jit
def flash_bwd(q, k, v, o, do, lse, dq, dk, dv, scale, causal):
    """Out-parameter kernel: writes dq, dk, dv (BH, S, D) float32.
    P = exp(S*scale - lse); dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO o O));
    dQ = scale dS K; dK = scale dS^T Q."""
    BH, S, D = q.shape
    T = S // 128
    for b in nl.affine_range(BH):
        for ki in nl.affine_range(T):
            kT = nl.ndarray((D, 128), k.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=kT, src=k[b, nl.ds(ki * 128, 128), :])
            vT = nl.ndarray((D, 128), v.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=vT, src=v[b, nl.ds(ki * 128, 128), :])
            kt = nl.ndarray((128, D), k.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=kt, src=k[b, nl.ds(ki * 128, 128), :])
            dk_acc = nl.ndarray((128, D), nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=dk_acc, value=0.0)
            dv_acc = nl.ndarray((128, D), nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=dv_acc, value=0.0)
            for qi in nl.sequential_range(T):
                qT = nl.ndarray((D, 128), q.dtype, buffer=nl.sbuf)
                nisa.dma_transpose(dst=qT, src=q[b, nl.ds(qi * 128, 128), :])
                qt = nl.ndarray((128, D), q.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=qt, src=q[b, nl.ds(qi * 128, 128), :])
                dot = nl.ndarray((128, D), do.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=dot, src=do[b, nl.ds(qi * 128, 128), :])
                doT = nl.ndarray((D, 128), do.dtype, buffer=nl.sbuf)
                nisa.dma_transpose(dst=doT, src=do[b, nl.ds(qi * 128, 128), :])
                ott = nl.ndarray((128, D), o.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=ott, src=o[b, nl.ds(qi * 128, 128), :])
                nl_lse = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=nl_lse, src=lse[b, nl.ds(qi * 128, 128), :])
                nisa.tensor_scalar(dst=nl_lse, data=nl_lse, op0=nl.multiply, operand0=-1.0)
                # P (q rows x k cols)
                s_ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=s_ps, stationary=qT, moving=kT)
                s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=s, op=nl.copy, data=s_ps, scale=scale)
                if causal:
                    nisa.affine_select(
                        dst=s,
                        pattern=[[-1, 128]],
                        channel_multiplier=1,
                        on_true_tile=s,
                        on_false_value=NEG,
                        cmp_op=nl.greater_equal,
                        offset=(qi - ki) * 128,
                    )
                p = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=p, op=nl.exp, data=s, bias=nl_lse)
                # Drow = rowsum(dO * O)
                prod = nl.ndarray((128, D), nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=prod, data1=dot, data2=ott, op=nl.multiply)
                drow = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=drow, op=nl.add, data=prod, axis=1)
                # dP = dO V^T: stationary doT (D, 128q), moving vT (D, 128k)
                dp_ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dp_ps, stationary=doT, moving=vT)
                ds = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                nisa.scalar_tensor_tensor(
                    dst=ds, data=dp_ps, op0=nl.subtract, operand0=drow, op1=nl.multiply, operand1=p
                )
                # dV += P^T dO: stationary P (128q, 128k) -> (128k, D)
                pv_ps = nl.ndarray((128, D), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=pv_ps, stationary=p, moving=dot)
                nisa.tensor_tensor(dst=dv_acc, data1=dv_acc, data2=pv_ps, op=nl.add)
                # dK += scale dS^T Q
                dk_ps = nl.ndarray((128, D), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dk_ps, stationary=ds, moving=qt)
                nisa.scalar_tensor_tensor(
                    dst=dk_acc,
                    data=dk_ps,
                    op0=nl.multiply,
                    operand0=scale,
                    op1=nl.add,
                    operand1=dk_acc,
                )
                # dQ (rows qi) += scale dS K: stationary dS^T (128k, 128q), moving K (128k, D)
                dsT_ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=dsT_ps, data=ds)
                dsT = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=dsT, src=dsT_ps)
                dq_ps = nl.ndarray((128, D), nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dq_ps, stationary=dsT, moving=kt)
                dq_part = nl.ndarray((128, D), nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=dq_part, data=dq_ps, op0=nl.multiply, operand0=scale)
                # dq rows are shared by every key tile: accumulate in HBM, key tiles in order
                dq_old = nl.ndarray((128, D), nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=dq_old, src=dq[b, nl.ds(qi * 128, 128), :])
                nisa.tensor_tensor(dst=dq_old, data1=dq_old, data2=dq_part, op=nl.add)
                nisa.dma_copy(dst=dq[b, nl.ds(qi * 128, 128), :], src=dq_old)
            nisa.dma_copy(dst=dk[b, nl.ds(ki * 128, 128), :], src=dk_acc)
            nisa.dma_copy(dst=dv[b, nl.ds(ki * 128, 128), :], src=dv_acc)
