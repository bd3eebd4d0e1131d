"""Benchmark: routing a new task with TAMPO's policy vs DSPy-style random search.

Both pick a (prompt, model) action for each held-out task from the same pool
(SmolLM2-135M's early exits, or ``--model http://host:port/v1``) and the same prompt
space. Random search (the peer: DSPy's random-search prompt selection, implemented on
this pool; RouteLLM needs a CUDA torch stack and does not install here) evaluates
``--candidates`` random actions on ``--dev`` items of the task, real model calls, and
keeps the best. TAMPO's policy (trained offline against the pessimistic ensemble on the
other tasks) reads the task's label-free features and answers with one MLP call; the
features come from one probe pass of the reference prompt over the task's questions,
timed here too (the timed policy has the trained policies' shape; the utility numbers
are those of :func:`jaxsci.experiments.tampo._evaluate`). After warm-up, compile time
apart, best of three. Prints the realised utility of both (on the task's test items,
mean over a preference sweep) and the seconds per routed task, with the ratio.

    python scripts/bench/tampo.py [--tasks 8] [--items 6] [--candidates 4] [--dev 2]
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from _timing import timed

from jaxsci.agents import tampo as TM
from jaxsci.data import routing_tasks as RT
from jaxsci.experiments import tampo as E


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--items", type=int, default=6)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--dev", type=int, default=2)
    a = ap.parse_args()
    fams = tuple(f.name for f in RT.FAMILIES[:a.tasks])
    c = dataclasses.replace(E.CONFIGS["quick"], model=a.model, families=fams,
                            n_items=a.items, n_dev=a.dev, search_candidates=a.candidates,
                            folds=min(4, a.tasks))
    pool = E._pool(c)
    prompts = TM.prompt_space(c.styles, c.shots, c.verbalisers)
    data = TM.build_dataset(pool, fams, prompts, c.n_items)
    ev = E._evaluate(c, data, prompts, pool.arms, jax.random.key(0))
    u_pol, u_rs = float(np.mean(ev["pess_u"])), float(np.mean(ev["search_u"]))

    # per-task routing cost: the probe (reference prompt over the task's questions) plus
    # one policy call, against candidates x dev items of real answers
    fam = fams[0]
    its = RT.items(fam, c.n_items)
    shots = RT.items(fam, max(max(c.shots), 1), seed=1)
    probe = [TM.messages(it, prompts[0], shots) for it in its]
    probe_opts = [TM.answers(it, prompts[0].verbaliser) for it in its]
    rng = np.random.default_rng(0)
    cand = rng.choice(len(prompts), size=min(a.candidates, len(prompts)), replace=False)
    dev = [TM.messages(it, prompts[p], shots) for p in cand for it in its[:c.n_dev]]
    dev_opts = [TM.answers(it, prompts[p].verbaliser) for p in cand for it in its[:c.n_dev]]
    feats = jnp.asarray(data.features[:1])
    cost = jnp.asarray(data.cost.reshape(len(fams), -1)[:1])
    mu = jnp.full(cost.shape, 0.5)
    pol = TM.train_policy(jax.random.key(0), feats, mu, 0.1 * mu, cost, 1.0, c.policy)
    choose = jax.jit(TM.choose)

    def tampo_route():
        pool.read(probe, probe_opts)
        return choose(pol, feats[0], jnp.asarray([0.5, 0.5])).block_until_ready()

    def search_route():
        return pool.read(dev, dev_opts)[0]

    _, c_t, t_t = timed(tampo_route)
    _, c_s, t_s = timed(search_route)
    print(f"model {a.model}, {len(fams)} tasks x {len(prompts)} prompts x {len(pool.arms)} "
          f"arms, {c.n_items} items ({c.n_dev} dev), {c.folds} folds\n")
    print("| method | held-out utility | labelled calls per task | s per routed task | "
          "compile + first s |")
    print("|---|---|---|---|---|")
    print(f"| TAMPO policy (beta={c.beta:g}) | {u_pol:.3f} | 0 (+{c.n_items} unlabelled "
          f"probe prompts) | {t_t:.3f} | {c_t:.2f} |")
    print(f"| random search ({len(cand)} candidates x {c.n_dev} dev) | {u_rs:.3f} | "
          f"{len(cand) * c.n_dev} | {t_s:.3f} | {c_s:.2f} |")
    print(f"\nratio (random search s / TAMPO s per routed task): {t_s / t_t:.2f}; "
          f"utility difference (TAMPO - random search): {u_pol - u_rs:+.3f}")


if __name__ == "__main__":
    main()
