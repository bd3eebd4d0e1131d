"""Conditional flow matching: jaxsci (equinox + diffrax) vs torchcfm (PyTorch, CPU).

Same task and network: forecast a 32-step future window from a 32-step context, an
MLP of width 128 and depth 3 on [x, context, time features], Adam, batch 128.
torchcfm's ``ConditionalFlowMatcher(sigma=0)`` (its flow matcher draws ``x_0`` from
N(0, I): the Gaussian source) gives ``(t, x_t, u_t)``; jaxsci's step is one jitted
``fit``-style step with the same loss. Sampling: 20 Euler steps for 208 contexts x 20
samples (torch: a plain loop under ``no_grad``; jaxsci: ``sample_forecast``, jitted).
Both after warm-up; jaxsci's compile time is reported separately.

    pip install torch==2.13.0 pot && pip install torchcfm --no-deps
    python scripts/bench/bioflow.py            # or: jaxsci bench bioflow
"""

from __future__ import annotations

import platform
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxsci.dynamics import bioflow as bf

C, H, WIDTH, DEPTH, BATCH, N_FREQ = 32, 32, 128, 3, 128, 4
N_TEST, N_SAMPLES, STEPS = 208, 20, 20
TRAIN_REPS = 200


def data():
    rng = np.random.default_rng(0)
    tau = np.arange(C + H, dtype=np.float32)
    ph = rng.uniform(0, 6.28, (1024, 1)).astype(np.float32)
    w = rng.uniform(0.2, 0.8, (1024, 1)).astype(np.float32)
    y = np.sin(w * tau + ph) + 0.01 * tau
    return y[:, :C].copy(), y[:, C:].copy()


def bench_jax(ctx, fut):
    model = bf.ConditionalVelocity(H, C, WIDTH, DEPTH, N_FREQ, key=jax.random.key(0))
    opt = optax.adam(1e-3)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    ctx, fut = jnp.asarray(ctx), jnp.asarray(fut)

    @eqx.filter_jit
    def step(model, state, key):
        kb, kl = jax.random.split(key)
        idx = jax.random.randint(kb, (BATCH,), 0, ctx.shape[0])
        loss, g = eqx.filter_value_and_grad(
            lambda m: bf.cfm_loss(m, kl, ctx[idx], fut[idx], source=bf.GaussianSource()))(model)
        upd, state = opt.update(g, state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, upd), state, loss

    t0 = time.perf_counter()
    model, state, loss = step(model, state, jax.random.key(1))
    loss.block_until_ready()
    compile_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(TRAIN_REPS):
        model, state, loss = step(model, state, jax.random.key(i))
    loss.block_until_ready()
    train = (time.perf_counter() - t0) / TRAIN_REPS

    sample = eqx.filter_jit(lambda m, k, c: bf.sample_forecast(
        m, k, c, H, N_SAMPLES, source=bf.GaussianSource(), steps=STEPS))
    t0 = time.perf_counter()
    sample(model, jax.random.key(0), ctx[:N_TEST]).block_until_ready()
    compile_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(3):
        sample(model, jax.random.key(i), ctx[:N_TEST]).block_until_ready()
    samp = (time.perf_counter() - t0) / 3
    return train, samp, compile_train, compile_sample


def bench_torch(ctx, fut):
    import torch
    from torchcfm.conditional_flow_matching import ConditionalFlowMatcher

    torch.manual_seed(0)
    freqs = 2 * torch.pi * torch.arange(1, N_FREQ + 1, dtype=torch.float32)
    layers, d_in = [], H + C + 2 * N_FREQ + 1
    for i in range(DEPTH):
        layers += [torch.nn.Linear(d_in if i == 0 else WIDTH, WIDTH), torch.nn.SiLU()]
    net = torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, H))

    def velocity(t, x, c):
        tf = t[:, None] * freqs
        return net(torch.cat([x, c, t[:, None], torch.sin(tf), torch.cos(tf)], -1))

    fmatch = ConditionalFlowMatcher(sigma=0.0)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    ctx_t, fut_t = torch.from_numpy(ctx), torch.from_numpy(fut)

    def step():
        idx = torch.randint(0, ctx_t.shape[0], (BATCH,))
        x1, c = fut_t[idx], ctx_t[idx]
        t, xt, ut = fmatch.sample_location_and_conditional_flow(torch.randn_like(x1), x1)
        loss = ((velocity(t, xt, c) - ut) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    t0 = time.perf_counter()
    for _ in range(TRAIN_REPS):
        step()
    train = (time.perf_counter() - t0) / TRAIN_REPS

    @torch.no_grad()
    def sample():
        c = ctx_t[:N_TEST].repeat(N_SAMPLES, 1)
        x = torch.randn(c.shape[0], H)
        dt = 1.0 / STEPS
        for k in range(STEPS):
            x = x + dt * velocity(torch.full((x.shape[0],), k * dt), x, c)
        return x

    sample()
    t0 = time.perf_counter()
    for _ in range(3):
        sample()
    return train, (time.perf_counter() - t0) / 3


def main():
    ctx, fut = data()
    jt, js, jct, jcs = bench_jax(ctx, fut)
    tt, ts = bench_torch(ctx, fut)
    import torch

    print(f"machine: {platform.processor() or platform.machine()}, jax {jax.__version__} "
          f"({jax.devices()[0].platform}), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads)")
    print("| task | jaxsci (ms) | torchcfm (ms) | torchcfm / jaxsci | jaxsci compile (s) |")
    print("|---|---|---|---|---|")
    print(f"| train step (batch {BATCH}) | {1e3 * jt:.2f} | {1e3 * tt:.2f} | {tt / jt:.2f} | "
          f"{jct:.1f} |")
    print(f"| sample {N_TEST} x {N_SAMPLES}, {STEPS} Euler steps | {1e3 * js:.1f} | "
          f"{1e3 * ts:.1f} | {ts / js:.2f} | {jcs:.1f} |")


if __name__ == "__main__":
    main()
