"""Benchmark: AugMask training speed and time-to-quality, one model and a vmapped sweep.

The planted table (1500 rows, 30% MCAR). jaxsci trains the tabular DDPM with AugMask
(``jaxsci.generative.augmask.train``, jitted, after warm-up; compile time reported
apart): train steps per second for one model and for ``--sweep`` models in one
``jit(vmap(...))`` (the experiment's arms x seeds), and the correlation error of the
samples after ``--steps`` steps.

Peers:

* **plain PyTorch** (when ``torch`` imports; ``pip install torch==2.13.0``): the same
  MLP denoiser, cosine schedule, Adam and batch, trained with the masked loss on a fixed
  mean fill (the MissDiff-style step a user writes by hand), timed against jaxsci's
  ``missdiff`` arm (same step, no auxiliary draw) after warm-up, default threads;
* **synthcity's TabDDPM plugin** (``ddpm``). synthcity pins numpy < 2 and torch < 2.3,
  so it cannot live beside jaxsci: it runs in its own environment when the environment
  variable ``SYNTHCITY_PYTHON`` names that environment's Python (set it up with
  ``python3.11 -m venv /tmp/synthcity && /tmp/synthcity/bin/pip install synthcity``: a
  CPU torch < 2.3 and its dependencies, several GB). Without it the peer is skipped with
  a message. synthcity refuses NaN input, so its rows are mean-imputed first (what its
  users must do). This path was written against synthcity 0.2.12's documented plugin
  API and has not run on this machine (no environment for it here).

    python scripts/bench/augmask.py [--steps 1500] [--sweep 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.data import tabular
from jaxsci.experiments.augmask import fidelity
from jaxsci.generative import augmask as A

_PEER = """
import json, sys, time
import numpy as np, pandas as pd
from synthcity.plugins import Plugins
x = np.load(sys.argv[1]); steps = int(sys.argv[2]); n = int(sys.argv[3])
x = np.where(np.isnan(x), np.nanmean(x, 0), x)
df = pd.DataFrame(x, columns=[f"c{j}" for j in range(x.shape[1])])
for j in (6, 7):
    df[f"c{j}"] = (df[f"c{j}"] > 0.5).astype(int)
plugin = Plugins().get("ddpm", n_iter=steps, batch_size=128, num_timesteps=100)
t0 = time.perf_counter(); plugin.fit(df); fit_s = time.perf_counter() - t0
rows = plugin.generate(count=n).dataframe().to_numpy(dtype=float)
np.save(sys.argv[4], rows)
print(json.dumps({"fit_s": fit_s}))
"""


def torch_missdiff_steps_per_s(z, obs_c, cfg, steps):
    """Steps/s of a hand-written PyTorch masked-loss DDPM step (the jaxsci missdiff arm)."""
    import torch

    torch.manual_seed(0)
    x = torch.as_tensor(z, dtype=torch.float32)
    w_all = torch.as_tensor(obs_c, dtype=torch.float32)
    d, h = x.shape[1], cfg.hidden
    ab = torch.as_tensor(A.schedule(cfg)[1], dtype=torch.float32)
    half = cfg.time_dim // 2
    freqs = torch.exp(-np.log(10000.0) * torch.arange(half) / half)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(d, h)
            self.t1 = torch.nn.Linear(cfg.time_dim, h)
            self.t2 = torch.nn.Linear(h, h)
            self.layers = torch.nn.ModuleList(torch.nn.Linear(h, h) for _ in range(cfg.depth))
            self.out = torch.nn.Linear(h, d)

        def forward(self, xt, t):
            ang = t[:, None].float() * freqs
            temb = torch.cat([torch.cos(ang), torch.sin(ang)], -1)
            z = self.inp(xt) + self.t2(torch.nn.functional.silu(self.t1(temb)))
            for lay in self.layers:
                z = torch.nn.functional.silu(lay(z))
            return self.out(z)

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)

    def step():
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,))
        x0, w = x[idx], w_all[idx]
        t = torch.randint(0, cfg.timesteps, (cfg.batch_size,))
        eps = torch.randn_like(x0)
        a = ab[t][:, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
        loss = (w * (eps - net(xt, t)) ** 2).sum() / w.sum().clamp(min=1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(50):
        step()
    ts = []
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        ts.append(time.perf_counter() - t0)
    return steps / min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--sweep", type=int, default=8)
    args = ap.parse_args()
    x = np.asarray(tabular.planted_table(jax.random.key(0), 1500), float)
    mask = np.asarray(tabular.missing_mask(jax.random.key(1), np.float32(x), "mcar", 0.3))
    x_nan = np.where(mask, x, np.nan)
    real = np.asarray(tabular.planted_table(jax.random.key(2), 3000), float)
    enc = A.fit_encoder(x_nan, tabular.PLANTED_CARDINALITIES)
    z, obs = enc.encode(x_nan)
    data = A.TabularData(jnp.asarray(z, jnp.float32), jnp.asarray(obs, jnp.float32))
    cfg = A.AugMaskConfig(hidden=64, depth=2, steps=args.steps, batch_size=128,
                          aux_steps=200)
    lay = enc.layout
    a = A.arm("augmask")

    def one(k):
        return A.train(data, a, k, lay, cfg)["params"]

    def best(fn, reps=3):
        """(compile estimate, best time of ``reps`` calls after the first, last output)."""
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(0))
        first = time.perf_counter() - t0
        ts = []
        for r in range(1, reps + 1):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(r))
            ts.append(time.perf_counter() - t0)
        return max(first - min(ts), 0.0), min(ts), out

    rows = []
    # One model (train compiles on the first call; the best of three later calls).
    first, t1, params = best(lambda r: one(jax.random.key(3 + r)))
    first += t1
    synth = enc.decode(np.asarray(A.sample(params, 3000, jax.random.key(5), lay, cfg)))
    rows.append(("jaxsci AugMask, 1 model", t1, args.steps / t1, max(first - t1, 0.0),
                 fidelity(synth, real)["corr_err"]))
    # A vmapped sweep of models (seeds here; arms in the experiment).
    sweep = jax.jit(jax.vmap(one))
    first, ts, _ = best(lambda r: sweep(jax.random.split(jax.random.key(60 + r), args.sweep)),
                        reps=2)
    first += ts
    rows.append((f"jaxsci AugMask, {args.sweep} models vmapped", ts,
                 args.sweep * args.steps / ts, max(first - ts, 0.0), float("nan")))
    # Like for like with the hand-written peer: the masked loss on a fixed fill.
    md = A.arm("missdiff")
    _, tm, _ = best(lambda r: A.train(data, md, jax.random.key(80 + r), lay, cfg)["params"])
    rows.append(("jaxsci missdiff arm (masked loss, fixed fill), 1 model", tm,
                 args.steps / tm, float("nan"), float("nan")))
    try:
        sps = torch_missdiff_steps_per_s(z, obs[:, lay.column_of], cfg, args.steps)
        rows.append(("plain PyTorch, masked loss, fixed fill, 1 model", args.steps / sps,
                     sps, float("nan"), float("nan")))
    except ImportError:
        print("PyTorch peer skipped: pip install torch==2.13.0")
    peer = os.environ.get("SYNTHCITY_PYTHON")
    if not peer:
        print("synthcity peer skipped: set SYNTHCITY_PYTHON to a Python with synthcity "
              "installed (it pins numpy < 2 and torch < 2.3; see this script's docstring).")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            np.save(f"{tmp}/x.npy", x_nan)
            script = f"{tmp}/peer.py"
            with open(script, "w") as fh:
                fh.write(_PEER)
            out = subprocess.run([peer, script, f"{tmp}/x.npy", str(args.steps), "3000",
                                  f"{tmp}/rows.npy"], capture_output=True, text=True,
                                 check=True)
            fit_s = json.loads(out.stdout.strip().splitlines()[-1])["fit_s"]
            rows.append(("synthcity ddpm (mean-imputed input)", fit_s, args.steps / fit_s,
                         float("nan"), fidelity(np.load(f"{tmp}/rows.npy"), real)["corr_err"]))
    base = rows[0][2]
    print(f"planted table 1500 x 8, 30% MCAR, {args.steps} steps of batch 128, "
          f"{jax.devices()[0].platform}")
    print("jaxsci train times include fitting the auxiliary heads (2 x 200 steps); "
          "PyTorch's is the denoiser loop alone.")
    print("| implementation | train time (s) | model-steps/s | compile (s) | corr. error "
          "| steps/s vs 1 jaxsci model |")
    print("|---|---|---|---|---|---|")
    for name, t, sps, comp, ce in rows:
        print(f"| {name} | {t:.2f} | {sps:.0f} | {comp:.1f} | {ce:.3f} | {sps / base:.2f} |")
    same = [r for r in rows if r[0].startswith(("jaxsci missdiff", "plain PyTorch"))]
    if len(same) == 2:
        print(f"same masked-loss step: PyTorch time / jaxsci time = {same[0][2] / same[1][2]:.2f}"
              " (jaxsci's includes its auxiliary heads' fit)")


if __name__ == "__main__":
    main()
