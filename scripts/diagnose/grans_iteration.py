"""Where one G-RANS iteration's time goes, against a CG iteration (docs/grans.md, "Speed").

    python scripts/diagnose/grans_iteration.py --sizes 65,129,257 --pad 1,4

Poisson on the unit square (float64 system, the network in float32, an untrained
model of the default size: timings do not depend on the weights), after compilation,
mean of ``--repeats`` calls. ``--pad k`` pads the edge list to ``k * 7 n`` entries
(the experiment padded to ``28 n`` before 2026-12-07; ``0``: no padding).
"""

from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import scipy.sparse.linalg as sla

from jaxsci.data import fem
from jaxsci.solvers import grans as gr


def _ms(f, *args, repeats):
    jax.block_until_ready(f(*args))
    t0 = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(f(*args))
    return (time.perf_counter() - t0) / repeats * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="65,129")
    p.add_argument("--pad", default="0,4")
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    jax.config.update("jax_enable_x64", True)
    model = gr.init_model(jax.random.key(0))
    weights_fn = eqx.filter_jit(gr._edge_weights)
    basis_fn = eqx.filter_jit(lambda m, g, r, w: gr.basis(m, g, r, w))
    cycle_fn = eqx.filter_jit(lambda m, g, r, w: gr.cycle(m, g, r, w))
    matvec_fn = jax.jit(gr.matvec)
    print(f"{'n':>6s} {'nnz':>7s} {'edges':>7s} {'matvec':>8s} {'weights':>8s} {'basis':>8s} "
          f"{'cycle':>8s} {'CG iter':>8s} {'cycle/CG':>9s}   (ms; CG: scipy, to 1e-5)")
    for size in (int(v) for v in args.sizes.split(",")):
        prob = fem.assemble(jax.random.key(0), "poisson", size=size)
        n, A = prob.n, prob.matrix.tocsr()
        b = jnp.asarray(prob.rhs, jnp.float64)
        iters = []
        t0 = time.perf_counter()
        sla.cg(A, prob.rhs, rtol=1e-5, callback=iters.append)
        cg_ms = (time.perf_counter() - t0) / max(len(iters), 1) * 1e3
        for k in (int(v) for v in args.pad.split(",")):
            pad = k * 7 * n if k else None
            g = gr.build_graph(fem.to_bcoo(prob.matrix, jnp.float64, nnz=pad), prob.coords,
                               levels=model.config.levels, nnz=pad)
            r = args.repeats
            t_mv = _ms(matvec_fn, g, b, repeats=r)
            t_w = _ms(weights_fn, model, g, repeats=r)
            w = weights_fn(model, g)
            t_b = _ms(basis_fn, model, g, b, w, repeats=r)
            t_c = _ms(cycle_fn, model, g, b, w, repeats=r)
            print(f"{n:6d} {A.nnz:7d} {g.rows.shape[0]:7d} {t_mv:8.3f} {t_w:8.2f} {t_b:8.2f} "
                  f"{t_c:8.2f} {cg_ms:8.4f} {t_c / cg_ms:9.0f}")


if __name__ == "__main__":
    main()
