"""Train G-RANS on a few small random Poisson problems, then solve a larger one to 1e-5.

    python examples/grans_poisson.py
"""

import jax
import jax.numpy as jnp

from jaxsci.core import RESULTS
from jaxsci.data import fem
from jaxsci.solvers import grans as gr
from jaxsci.solvers import krylov

cfg = gr.GRANSConfig()
train = [fem.assemble(jax.random.key(i), "poisson", size=17) for i in range(4)]
nnz = max(p.matrix.nnz for p in train)
graphs = gr.stack_graphs(
    [gr.build_graph(fem.to_bcoo(p.matrix), p.coords, levels=cfg.levels, nnz=nnz) for p in train]
)
rhs = jnp.stack([jnp.asarray(p.rhs, jnp.float32) for p in train])
# strategies are values: the paper's Galerkin projection and weighted Jacobi (omega = 2/3)
model0 = gr.init_model(jax.random.key(0), cfg, projection=gr.Galerkin(), smoother=gr.Jacobi())
model, losses = gr.train(model0, graphs, rhs, jax.random.key(1),
                         gr.GRANSTrainConfig(stages=2, steps_per_stage=60), progress=True)

test = fem.assemble(jax.random.key(100), "poisson", size=49)  # 2209 unknowns, unseen
with jax.enable_x64(True):  # float32 Krylov stalls above 1e-5 on these systems
    a = fem.to_bcoo(test.matrix, jnp.float64)
    graph = gr.build_graph(a, test.coords, levels=cfg.levels)
    res = gr.solve_fgmres(model, graph, jnp.asarray(test.rhs), tol=1e-5, throw=False)
print("converged", bool(res.result == RESULTS.successful), "iterations", int(res.iterations),
      "relative residual", krylov.relative_residual(test.matrix, test.rhs, res.x))
