"""Benchmark: one NT-SSM training step on an edge list vs a dense adjacency (and torch).

A LightGCN step propagates the whole graph (L = 2 layers) and differentiates the loss of
one batch. jaxsci propagates on the edge list with ``segment_sum``
(:func:`jaxsci.recsys.ntssm.propagate`); the common alternative materialises the
normalised ``(U + I)^2`` adjacency and multiplies densely. Both compute the same
gradients (checked here). When PyTorch is installed, the authors' style of step
(``torch.sparse.mm`` propagation, the four-term NT-SSM loss, CPU) is timed as well;
otherwise it is skipped with a message.

For each scale (``--scale 1`` is the quick experiment's graph, 600 users x 500 items;
``--scale 10`` ten times the users, items and interactions) it prints steps/s after
warm-up (compile time apart) and XLA's peak memory estimate of the compiled step
(arguments + temporaries, ``compiled.memory_analysis()``), and the ratios.

    python scripts/bench/ntssm.py [--scales 1 10] [--batch 2048] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.data import recsys
from jaxsci.recsys import ntssm as nt


def _graph(scale: int):
    d = recsys.community_interactions(jax.random.key(0), n_users=600 * scale,
                                      n_items=500 * scale, mean_degree=25.0)
    return d, nt.bipartite_graph(d.users, d.items, d.n_users, d.n_items)


def _loss_from_parts(parts, u, i, w, tau):
    return nt.nt_ssm_loss(parts.user_even[u], parts.user_odd[u], parts.item_even[i],
                          parts.item_odd[i], w, tau)


def _dense_parts(adj, ue, ie, n_layers, n_users):
    x = jnp.concatenate([ue, ie])
    even, odd = x, jnp.zeros_like(x)
    for layer in range(1, n_layers + 1):
        x = adj @ x
        even, odd = (even, odd + x) if layer % 2 else (even + x, odd)
    even, odd = even / (n_layers + 1), odd / (n_layers + 1)
    return nt.ParitySums(even[:n_users], odd[:n_users], even[n_users:], odd[n_users:])


def _time(f, args, repeats):
    t0 = time.perf_counter()
    lowered = f.lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    peak = (mem.argument_size_in_bytes + mem.temp_size_in_bytes + mem.output_size_in_bytes) \
        if mem is not None else float("nan")
    jax.block_until_ready(compiled(*args))
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = compiled(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / repeats, compile_s, peak / 2**20, out


def _torch_step(d, g, ue, ie, idx, repeats):
    try:
        import torch
    except ImportError:
        return None
    n = d.n_users + d.n_items
    a = torch.sparse_coo_tensor(np.stack([np.asarray(g.dst), np.asarray(g.src)]),
                                np.asarray(g.weight), (n, n)).coalesce()
    ut = torch.tensor(np.asarray(ue), requires_grad=True)
    it = torch.tensor(np.asarray(ie), requires_grad=True)
    u = torch.tensor(d.users[idx].astype(np.int64))
    i = torch.tensor(d.items[idx].astype(np.int64))
    w = nt.TypeWeights.paper()
    a_uu, a_ii, a_ui, a_iu = (float(x) for x in w.as_array())

    def direction(ae, ao, oe, oo, w_odd, w_even, tau=0.2):
        den = (ae + ao).norm(dim=1)[:, None] * (oe + oo).norm(dim=1)[None] + 1e-8
        c_uu, c_ii, c_ui, c_iu = ae @ oo.T / den, ao @ oe.T / den, ae @ oe.T / den, \
            ao @ oo.T / den
        eye = torch.eye(ae.shape[0])
        r = (c_uu + c_ii + c_ui + c_iu) * eye + (w_odd * c_uu + w_even * c_ii
                                                  + w_even * c_ui + w_odd * c_iu) * (1 - eye)
        lg = r / tau
        return -(torch.diag(lg) - torch.logsumexp(lg, dim=1)).mean()

    def step():
        x = torch.cat([ut, it])
        layers = [x]
        for _ in range(2):
            layers.append(torch.sparse.mm(a, layers[-1]))
        even = (layers[0] + layers[2]) / 3
        odd = layers[1] / 3
        nu = d.n_users
        p = (even[:nu][u], odd[:nu][u], even[nu:][i], odd[nu:][i])
        loss = 0.5 * (direction(p[0], p[1], p[2], p[3], a_iu, a_ii)
                      + direction(p[2], p[3], p[0], p[1], a_uu, a_ui))
        ut.grad = it.grad = None
        loss.backward()
        return ut.grad

    torch.set_num_threads(max(1, torch.get_num_threads()))
    step()
    t0 = time.perf_counter()
    for _ in range(repeats):
        grad = step()
    return (time.perf_counter() - t0) / repeats, grad.numpy()


def bench(scale: int, batch: int, repeats: int) -> dict:
    d, g = _graph(scale)
    rng = np.random.default_rng(0)
    ue = jnp.asarray(rng.normal(size=(d.n_users, 64)) * 0.05, jnp.float32)
    ie = jnp.asarray(rng.normal(size=(d.n_items, 64)) * 0.05, jnp.float32)
    idx = rng.choice(d.n_train, min(batch, d.n_train), replace=False)
    u, i = jnp.asarray(d.users[idx]), jnp.asarray(d.items[idx])
    w = nt.TypeWeights.paper()

    def sparse_loss(ue, ie):
        return _loss_from_parts(nt.propagate(g, ue, ie, 2), u, i, w, 0.2)

    n = d.n_users + d.n_items
    adj = jnp.zeros((n, n), jnp.float32).at[g.dst, g.src].add(g.weight)

    def dense_loss(ue, ie, adj):
        return _loss_from_parts(_dense_parts(adj, ue, ie, 2, d.n_users), u, i, w, 0.2)

    sp = jax.jit(jax.value_and_grad(sparse_loss, argnums=(0, 1)))
    de = jax.jit(jax.value_and_grad(dense_loss, argnums=(0, 1)))
    t_sp, c_sp, m_sp, out_sp = _time(sp, (ue, ie), repeats)
    t_de, c_de, m_de, out_de = _time(de, (ue, ie, adj), repeats)
    err = float(jnp.max(jnp.abs(out_sp[1][0] - out_de[1][0])) / jnp.max(jnp.abs(out_de[1][0])))
    row = {"scale": scale, "users": d.n_users, "items": d.n_items, "edges": d.n_train,
           "batch": len(idx), "sparse_s": t_sp, "sparse_compile_s": c_sp, "sparse_mib": m_sp,
           "dense_s": t_de, "dense_compile_s": c_de, "dense_mib": m_de, "grad_rel_err": err}
    torch_out = _torch_step(d, g, ue, ie, idx, repeats)
    if torch_out is not None:
        row["torch_s"] = torch_out[0]
        row["torch_grad_rel_err"] = float(np.max(np.abs(torch_out[1] - np.asarray(out_sp[1][0])))
                                          / np.max(np.abs(torch_out[1])))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    rows = [bench(s, a.batch, a.repeats) for s in a.scales]
    has_torch = all("torch_s" in r for r in rows)
    if not has_torch:
        print("PyTorch is not installed: the torch.sparse column is skipped "
              "(pip install torch==2.13.0 to add it)\n")
    head = ("| scale | users | items | edges | batch | jaxsci edge list s/step | compile s | "
            "dense adjacency s/step | compile s | dense / jaxsci time | jaxsci MiB | dense MiB "
            "| dense / jaxsci memory | grad rel. diff |")
    if has_torch:
        head += " torch.sparse s/step | torch / jaxsci | torch grad rel. diff |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        line = (f"| {r['scale']} | {r['users']} | {r['items']} | {r['edges']} | {r['batch']} | "
                f"{r['sparse_s']:.4f} | {r['sparse_compile_s']:.2f} | {r['dense_s']:.4f} | "
                f"{r['dense_compile_s']:.2f} | {r['dense_s'] / r['sparse_s']:.2f}x | "
                f"{r['sparse_mib']:.0f} | {r['dense_mib']:.0f} | "
                f"{r['dense_mib'] / r['sparse_mib']:.1f}x | {r['grad_rel_err']:.1e} |")
        if has_torch:
            line += (f" {r['torch_s']:.4f} | {r['torch_s'] / r['sparse_s']:.2f}x | "
                     f"{r['torch_grad_rel_err']:.1e} |")
        print(line)


if __name__ == "__main__":
    main()
