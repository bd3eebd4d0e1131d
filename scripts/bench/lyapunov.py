"""Benchmark: jaxsci's IBP / CROWN bounds vs a plain PyTorch implementation.

The peer a user would pick is auto_LiRPA, but it does not install here: PyPI's latest
release (0.3) requires ``torch<1.13`` (torch 2.13.0+cpu is what this machine has) and,
installed with ``--no-deps``, fails at import on NumPy 2 (``numpy.lib.arraysetops``
was removed). So the peer is **plain PyTorch IBP and CROWN** for ReLU MLPs (what a user
writes without auto_LiRPA: the same textbook relaxations -- triangle upper line,
adaptive 0/1 lower slope, intermediate bounds by CROWN -- batched over boxes, no
rounding pads). Both run the same networks (weights copied) on the same boxes.

Reported per network: time per batch of boxes (jaxsci after warm-up, compile time
separate; torch after warm-up; fast rows average back-to-back calls, see ``per_call``),
the ratio, and tightness: mean bound width over the sampled output range (1.0 =
exact), and the largest gap between the two libraries' CROWN upper bounds (ours add
outward rounding pads and intersect with IBP).

    python scripts/bench/lyapunov.py [--boxes 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from jaxsci.common import bounds as bd

NETS = [(4, (32, 32)), (8, (128, 128)), (16, (256, 256, 256))]


def make_net(key, n_in, hidden):
    dims = (n_in,) + hidden + (1,)
    layers = []
    ks = jax.random.split(key, 2 * len(dims))
    for i in range(1, len(dims)):
        W = jax.random.normal(ks[2 * i], (dims[i], dims[i - 1])) / np.sqrt(dims[i - 1])
        b = 0.1 * jax.random.normal(ks[2 * i + 1], (dims[i],))
        act = (bd.IDENTITY,) * dims[i] if i == len(dims) - 1 else (bd.RELU,) * dims[i]
        layers.append(bd.Layer(W, b, act))
    return bd.Program(tuple(layers))


# --------------------------------------------------------------------------- torch peer


def torch_bounds(Ws, bs, lo, hi, method):
    """Plain batched IBP / CROWN for a ReLU MLP (Linear-ReLU-...-Linear)."""
    import torch

    L = len(Ws)
    pre = []  # pre-activation bounds of hidden layers

    def ibp_layer(W, b, lo_, hi_):
        c, r = (hi_ + lo_) / 2, (hi_ - lo_) / 2
        zc = c @ W.T + b
        zr = r @ W.abs().T
        return zc - zr, zc + zr

    if method == "ibp":
        zl, zu = lo, hi
        for k in range(L):
            zl, zu = ibp_layer(Ws[k], bs[k], zl, zu)
            if k < L - 1:
                zl, zu = zl.clamp(min=0), zu.clamp(min=0)
        return zl, zu

    def backward(k, Lam):
        """Upper bound of Lam @ z_k (Lam: B x m x d_k) given pre[0..k-1]."""
        const = Lam @ bs[k]
        A = Lam @ Ws[k]
        for j in range(k - 1, -1, -1):
            zl, zu = pre[j]
            cross = (zl < 0) & (zu > 0)
            su = torch.where(cross, zu / (zu - zl).clamp(min=1e-12), (zl >= 0).to(zl.dtype))
            tu = torch.where(cross, -su * zl, torch.zeros_like(zl))
            sl = torch.where(cross, (zu >= -zl).to(zl.dtype), (zl >= 0).to(zl.dtype))
            Ap, An = A.clamp(min=0), A.clamp(max=0)
            nu = Ap * su[:, None] + An * sl[:, None]
            const = const + (Ap * tu[:, None]).sum(-1)
            const = const + nu @ bs[j]
            A = nu @ Ws[j]
        Ap, An = A.clamp(min=0), A.clamp(max=0)
        return const + (Ap @ hi[..., None] + An @ lo[..., None])[..., 0]

    B = lo.shape[0]
    for k in range(L - 1):
        if k == 0:
            zl, zu = ibp_layer(Ws[0], bs[0], lo, hi)
        else:
            d = Ws[k].shape[0]
            eye = torch.eye(d, dtype=lo.dtype).expand(B, d, d)
            zu = backward(k, eye)
            zl = -backward(k, -eye)
        pre.append((zl, zu))
    m = Ws[-1].shape[0]
    eye = torch.eye(m, dtype=lo.dtype).expand(B, m, m)
    return -backward(L - 1, -eye), backward(L - 1, eye)


# --------------------------------------------------------------------------- main


def per_call(fn, repeats, min_s=0.05):
    """Median over ``repeats`` of the mean time of ``k`` back-to-back calls, ``k`` chosen
    so that one repeat lasts at least ``min_s`` (sub-millisecond rows are otherwise
    timer and scheduler noise: the 4-32-32-1 IBP row moved 0.98-1.47x between runs)."""
    t0 = time.perf_counter()
    fn()
    k = max(1, int(min_s / max(time.perf_counter() - t0, 1e-6)))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        times.append((time.perf_counter() - t0) / k)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--boxes", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import torch

    torch.set_grad_enabled(False)
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); peer: plain PyTorch IBP/CROWN "
          "(auto_LiRPA not installable)")
    hdr = (f"{'net':>18} {'method':>6} | {'jaxsci ms':>9} {'compile s':>9} | {'torch ms':>9} | "
           f"{'ratio':>6} | {'width/range jaxsci':>18} {'torch':>7} | {'max gap':>8}")
    print(hdr)
    print("-" * len(hdr))
    for i, (n_in, hidden) in enumerate(NETS):
        prog = make_net(jax.random.key(i), n_in, hidden)
        k1, k2, k3 = jax.random.split(jax.random.key(100 + i), 3)
        c = jax.random.normal(k1, (args.boxes, n_in))
        r = jax.random.uniform(k2, (args.boxes, n_in), minval=0.01, maxval=0.3)
        lo, hi = c - r, c + r
        # Sampled output range per box (a lower bound on the true range).
        u = lo[:, None] + (hi - lo)[:, None] * jax.random.uniform(k3, (args.boxes, 256, n_in))
        y = jax.vmap(prog)(u)[..., 0]
        rng = np.asarray(y.max(1) - y.min(1))
        Ws = [torch.tensor(np.asarray(layer.W)) for layer in prog.layers]
        bs = [torch.tensor(np.asarray(layer.b)) for layer in prog.layers]
        tlo, thi = torch.tensor(np.asarray(lo)), torch.tensor(np.asarray(hi))
        for method in ("ibp", "crown"):
            if method == "ibp":
                f = jax.jit(jax.vmap(lambda a, b, p=prog: tuple(bd.ibp(p, a, b))))
            else:
                f = jax.jit(jax.vmap(lambda a, b, p=prog: tuple(bd.crown(p, a, b))[:2]))
            t0 = time.perf_counter()
            jl, jh = jax.block_until_ready(f(lo, hi))
            compile_s = time.perf_counter() - t0
            t_jax = per_call(lambda f=f, a=lo, b=hi: jax.block_until_ready(f(a, b)), args.repeats)
            tl, th = torch_bounds(Ws, bs, tlo, thi, method)  # warm-up
            t_torch = per_call(
                lambda W=Ws, b=bs, a=tlo, c=thi, m=method: torch_bounds(W, b, a, c, m),
                args.repeats)
            w_j = np.asarray(jh - jl)[:, 0]
            w_t = (th - tl).numpy()[:, 0]
            gap = float(np.max(np.abs(np.asarray(jh)[:, 0] - th.numpy()[:, 0])))
            net = f"{n_in}-" + "-".join(map(str, hidden)) + "-1"
            print(f"{net:>18} {method:>6} | {1e3 * t_jax:>9.2f} {compile_s:>9.2f} | "
                  f"{1e3 * t_torch:>9.2f} | {t_torch / t_jax:>6.2f} | "
                  f"{np.median(w_j / rng):>18.3f} {np.median(w_t / rng):>7.3f} | {gap:>8.1e}")
    print(f"{args.boxes} boxes per batch; ms = one batch; ratio = torch / jaxsci (higher: jaxsci "
          "faster); width/range = median over boxes of (upper - lower) / sampled output "
          "range; max gap = largest |upper_jaxsci - upper_torch| (jaxsci adds rounding pads)")


if __name__ == "__main__":
    main()
