"""Sparse products in G-RANS: which layout is fastest on CPU (docs/grans.md, "Speed").

    python scripts/diagnose/grans_sparse.py --sizes 65,129,257

On the P1 Poisson systems of the benchmark (unpadded edge lists), after compilation,
mean of ``--repeats`` calls, ms:

* the matvec ``A x`` (float64, one column): the library's edge list with
  ``segment_sum`` (:func:`jaxsci.solvers.grans.matvec`), ``jax.experimental.sparse``
  BCSR and BCOO products, and scipy's CSR product;
* one message pass of the network (float32, 16 channels, a weight per edge and
  channel, ``sum_j w_ij * h_j``): ``segment_sum`` over the edge list (what
  :func:`jaxsci.solvers.grans.basis` does), an ELL layout (each row's edges padded to
  the largest degree: a gather and a dense reduction, no scatter), and scipy's CSR
  product on 16 columns with one weight per edge (the same arithmetic with shared
  weights, a lower bound for a CPU library);
* the whole basis (network + smoothing) for scale: the network runs 2 fine and 3
  coarse message passes plus 3 poolings, so the rest of its time is its MLPs.
"""

from __future__ import annotations

import argparse
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from grans_iteration import _ms  # this folder is on sys.path when run as a script
from jax.experimental import sparse as jsparse

from jaxsci.data import fem
from jaxsci.solvers import grans as gr


@functools.partial(jax.jit, static_argnames="n")
def _seg_msg(w, h, rows, cols, n):
    return jax.ops.segment_sum(w * h[cols], rows, num_segments=n)


@jax.jit
def _ell_msg(w_ell, h, ell_cols):
    return jnp.sum(w_ell * h[ell_cols], axis=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="65,129,257")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--channels", type=int, default=16)
    args = p.parse_args()
    jax.config.update("jax_enable_x64", True)
    reps, ch = args.repeats, args.channels
    model = gr.init_model(jax.random.key(0))
    basis_fn = eqx.filter_jit(lambda m, g, r, w: gr.basis(m, g, r, w))
    seg_mv = jax.jit(gr.matvec)
    print("matvec (float64, 1 column) | message pass (float32, "
          f"{ch} channels) | basis; ms")
    print(f"{'n':>6s} {'nnz':>7s} | {'segsum':>7s} {'BCSR':>7s} {'BCOO':>7s} {'scipy':>7s} | "
          f"{'segsum':>7s} {'ELL':>7s} {'scipy':>7s} | {'basis':>7s}")
    for size in (int(v) for v in args.sizes.split(",")):
        prob = fem.assemble(jax.random.key(0), "poisson", size=size)
        n, csr = prob.n, prob.matrix.tocsr()
        csr.sort_indices()
        g = gr.build_graph(fem.to_bcoo(prob.matrix, jnp.float64), prob.coords,
                           levels=model.config.levels)
        x = jnp.asarray(np.random.default_rng(0).normal(size=n))
        bcoo = jsparse.BCOO((g.values, jnp.stack([g.rows, g.cols], 1)), shape=(n, n))
        bcsr = jsparse.BCSR.from_bcoo(bcoo.sort_indices())
        t_seg = _ms(seg_mv, g, x, repeats=reps)
        t_bcsr = _ms(jax.jit(lambda a, v: a @ v), bcsr, x, repeats=reps)
        t_bcoo = _ms(jax.jit(lambda a, v: a @ v), bcoo, x, repeats=reps)
        xn = np.asarray(x)
        t_sp = _ms(csr.dot, xn, repeats=reps)
        np.testing.assert_allclose(np.asarray(seg_mv(g, x)), csr @ xn, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(bcsr @ x), csr @ xn, rtol=1e-10, atol=1e-10)

        # message pass: sum_j w_ij[c] h_j[c]
        rows, cols = np.asarray(g.rows), np.asarray(g.cols)
        nnz = rows.shape[0]
        w = jax.random.normal(jax.random.key(1), (nnz, ch), jnp.float32)
        h = jax.random.normal(jax.random.key(2), (n, ch), jnp.float32)
        order = np.lexsort((cols, rows))
        deg = np.bincount(rows, minlength=n)
        start = np.concatenate([[0], np.cumsum(deg)[:-1]])
        pos = np.arange(nnz) - start[rows[order]]
        k = int(deg.max())
        ell_c = np.zeros((n, k), np.int32)
        ell_c[rows[order], pos] = cols[order]
        ell_e = np.full((n, k), nnz, np.int32)  # the padding slot points at a zero weight
        ell_e[rows[order], pos] = order
        w_ell = jnp.concatenate([w, jnp.zeros((1, ch), w.dtype)])[jnp.asarray(ell_e)]
        ell_cj = jnp.asarray(ell_c)
        np.testing.assert_allclose(np.asarray(_ell_msg(w_ell, h, ell_cj)),
                                   np.asarray(_seg_msg(w, h, g.rows, g.cols, n)),
                                   rtol=1e-4, atol=1e-4)
        t_mseg = _ms(functools.partial(_seg_msg, n=n), w, h, g.rows, g.cols, repeats=reps)
        t_mell = _ms(_ell_msg, w_ell, h, ell_cj, repeats=reps)
        csr32 = csr.astype(np.float32)
        hn = np.asarray(h)
        t_msp = _ms(csr32.dot, hn, repeats=reps)
        ew = eqx.filter_jit(gr._edge_weights)(model, g)
        t_basis = _ms(basis_fn, model, g, x, ew, repeats=max(2, reps // 4))
        print(f"{n:6d} {nnz:7d} | {t_seg:7.3f} {t_bcsr:7.3f} {t_bcoo:7.3f} {t_sp:7.3f} | "
              f"{t_mseg:7.3f} {t_mell:7.3f} {t_msp:7.3f} | {t_basis:7.2f}")


if __name__ == "__main__":
    main()
