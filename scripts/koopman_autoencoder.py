"""MERLIN's encoder/decoder alone: reconstruction error vs the design choices.

    python scripts/koopman_autoencoder.py --set wave --steps 250
    python scripts/koopman_autoencoder.py --set wave --basis 64 --dec-basis 64
    python scripts/koopman_autoencoder.py --set wave --probe encoder

Trains the function encoder/decoder with the Phase-I loss
(:func:`jaxsci.dynamics.koopman.phase1_loss`; ``--lambda-dyn 0 --lambda-pred 0`` for a
pure reconstruction loss) on the experiment's data (``jaxsci reproduce koopman
--quick``: 80 training / 20 test trajectories of 53 frames at 32 x 32, normalised by the
training mean and standard deviation), starting from the quick config's sizes, with
each design choice a flag. Prints the training loss along the way and, after training,
the autoencoder error of the experiment (every test frame encoded with its predecessors
and decoded, ``|u_rec - u|_2 / |u|_2`` in the data's units, mean over frames and
trajectories), the same on the training set and the wall times. ``--probe decoder`` /
``--probe encoder`` train one half alone against the exact linear other half (the
POD of the training frames): which half limits the error. Measured numbers:
docs/koopman.md, "Closing the reconstruction gap".
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.dynamics import koopman as kp
from jaxsci.experiments import koopman as ex


def floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def build_config(a) -> ex.KoopmanConfig:
    q = ex.CONFIGS["quick"]
    enc = dataclasses.replace(
        q.model.encoder,
        **{k: v for k, v in dict(
            n_tokens=a.tokens, token_dim=a.token_dim, width=a.width, heads=a.heads,
            n_self_layers=a.self_layers, n_cross_layers=a.cross_layers, n_freqs=a.n_freqs,
            freq_scale=a.freq_scale, rope=a.rope, rope_mode=a.rope_mode, pos_ref=a.pos_ref,
            basis=a.basis, basis_kind=a.basis_kind,
        ).items() if v is not None},
    )
    dec = dataclasses.replace(
        q.model.decoder,
        **{k: v for k, v in dict(
            hidden=a.dec_hidden, n_layers=a.dec_layers, input_scale=a.input_scale,
            mod_hidden=a.mod_hidden, basis=a.dec_basis,
        ).items() if v is not None},
    )
    p1 = dataclasses.replace(
        q.phase1,
        **{k: v for k, v in dict(
            steps=a.steps, lr=a.lr, batch_size=a.batch, window=a.window, n_query=a.n_query,
            lambda_dyn=a.lambda_dyn, lambda_pred=a.lambda_pred, warmup=a.warmup,
            cosine_decay=None if a.cosine is None else a.cosine == "on",
        ).items() if v is not None},
    )
    model = dataclasses.replace(q.model, encoder=enc, decoder=dec)
    return dataclasses.replace(q, datasets=(a.set,), masked_datasets=(), superres_datasets=(),
                               n_train=a.n_train, model=model, phase1=p1)


def recon_error(model, coords, fields, raw, mu, sd):
    """Mean relative L2 error of every delay stack's last frame, encoded and decoded."""
    zs = kp.encode_dataset(model, coords, jnp.asarray(fields)[..., None])
    rec = ex.decode_all(model, zs, coords) * sd + mu
    return float(ex.rel_l2(rec, raw[:, model.n_cond - 1:]).mean())


def probe(kind, model, config, coords, train, test, test_raw, mu, sd, key):
    """One half of the autoencoder trained against the linear (POD) other half.

    ``kind="decoder"``: latents are the fixed POD coefficients (``latent_dim`` modes of
    the training frames; linear, no encoder), the decoder is trained on them.
    ``kind="encoder"``: the decoder is the fixed POD reconstruction ``mean + V z``, the
    encoder (over the same ``n_cond`` delay stacks) is trained. Same steps, batch
    (``batch_size * window`` frames) and Adam schedule as Phase I, pure reconstruction.
    """
    import equinox as eqx
    import optax

    k = model.n_cond
    d = model.latent_dim
    frames = train.reshape(-1, train.shape[-1])
    mean = frames.mean(0)
    _, _, vt = np.linalg.svd(frames - mean, full_matrices=False)
    basis = jnp.asarray(vt[:d])  # [d, n]
    stacks = np.stack([train[:, j:train.shape[1] - k + 1 + j] for j in range(k)], -1)
    stacks = jnp.asarray(stacks.reshape(-1, train.shape[-1], k))  # [frames, n, k]
    targets = jnp.asarray(train[:, k - 1:].reshape(-1, train.shape[-1]))
    zs = (targets - mean) @ basis.T
    p1 = config.phase1
    n_batch = p1.batch_size * p1.window
    sched = optax.cosine_decay_schedule(p1.lr, p1.steps, alpha=0.05)
    opt = optax.adam(sched)
    part = model.decoder if kind == "decoder" else model.encoder
    mask = jnp.ones((coords.shape[0], k), bool)

    def predict(part, idx, q):
        if kind == "decoder":
            return jax.vmap(lambda z: part(z, coords[q])[:, 0])(zs[idx])
        z = jax.vmap(lambda v: part.apply(coords, v, mask))(stacks[idx])
        return (z @ basis + mean)[:, q]

    @eqx.filter_jit
    def step(part, state, key):
        ki, kq = jax.random.split(key)
        idx = jax.random.randint(ki, (n_batch,), 0, targets.shape[0])
        q = jax.random.choice(kq, coords.shape[0], (p1.n_query or coords.shape[0],),
                              replace=False)

        def loss(part):
            return jnp.mean((predict(part, idx, q) - targets[idx][:, q]) ** 2)

        val, grads = eqx.filter_value_and_grad(loss)(part)
        upd, state = opt.update(grads, state, part)
        return eqx.apply_updates(part, upd), state, val

    state = opt.init(eqx.filter(part, eqx.is_array))
    losses = []
    for k_step in jax.random.split(key, p1.steps):
        part, state, val = step(part, state, k_step)
        losses.append(float(val))
    tst = np.stack([test[:, j:test.shape[1] - k + 1 + j] for j in range(k)], -1)
    tst = jnp.asarray(tst.reshape(-1, test.shape[-1], k))
    t_target = test_raw[:, k - 1:].reshape(-1, test.shape[-1])
    z_t = (jnp.asarray(test[:, k - 1:].reshape(-1, test.shape[-1])) - mean) @ basis.T
    if kind == "decoder":
        rec = jax.lax.map(lambda z: part(z, coords)[:, 0], z_t, batch_size=64)
    else:
        rec = jax.lax.map(lambda v: part.apply(coords, v, mask), tst, batch_size=64) @ basis
        rec = rec + mean
    pod = np.asarray(z_t @ basis + mean)
    return (np.asarray(losses), float(ex.rel_l2(np.asarray(rec) * sd + mu, t_target).mean()),
            float(ex.rel_l2(pod * sd + mu, t_target).mean()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", default="wave", choices=ex.DATASETS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-train", type=int, default=80)
    # Phase I (default: the quick config's)
    p.add_argument("--steps", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup", type=int)
    p.add_argument("--cosine", choices=("on", "off"))
    p.add_argument("--batch", type=int)
    p.add_argument("--window", type=int)
    p.add_argument("--n-query", type=int)
    p.add_argument("--lambda-dyn", type=float)
    p.add_argument("--lambda-pred", type=float)
    # encoder
    p.add_argument("--tokens", type=int)
    p.add_argument("--token-dim", type=int)
    p.add_argument("--width", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--self-layers", type=int)
    p.add_argument("--cross-layers", type=int)
    p.add_argument("--n-freqs", type=int)
    p.add_argument("--freq-scale", type=float)
    p.add_argument("--rope", type=floats, help="comma-separated frequencies; '' for none")
    p.add_argument("--rope-mode", choices=("axial", "diagonal"))
    p.add_argument("--pos-ref", type=int)
    p.add_argument("--basis", type=int)
    p.add_argument("--basis-kind", choices=("fourier", "mlp"))
    # decoder
    p.add_argument("--dec-hidden", type=int)
    p.add_argument("--dec-layers", type=int)
    p.add_argument("--input-scale", type=float)
    p.add_argument("--mod-hidden", type=int)
    p.add_argument("--dec-basis", type=int)
    p.add_argument("--probe", choices=("decoder", "encoder"),
                   help="train one half against the linear POD other half (probe())")
    a = p.parse_args(argv)

    config = build_config(a)
    print(config.model, config.phase1, sep="\n", flush=True)
    key = jax.random.key(a.seed)
    i = ex.DATASETS.index(a.set)
    # The experiment's keys for this data set (its seed 0 run), so the numbers compare.
    k_data, k_fit, *_ = jax.random.split(jax.random.fold_in(key, i), 5)
    t0 = time.perf_counter()
    _, (train, test, test_raw, _, mu, sd) = ex._load(a.set, k_data, config)
    train_raw = train * sd + mu
    t_data = time.perf_counter() - t0
    coords = ex.grid_coords(config.n_grid)
    k_model, k_p1, _ = jax.random.split(k_fit, 3)
    model = ex.new_model(config, k_model)
    if a.probe:
        t0 = time.perf_counter()
        losses, err, err_pod = probe(a.probe, model, config, coords, train, test, test_raw,
                                     mu, sd, k_p1)
        marks = sorted({max(1, len(losses) * f // 10) for f in range(1, 11)})
        curve = ", ".join(f"{s}: {np.mean(losses[max(0, s - 10):s]):.4f}" for s in marks)
        print(f"training loss (mean of 10 steps before): {curve}")
        print(f"RESULT set={a.set} probe={a.probe} steps={len(losses)} recon_test={err:.4f} "
              f"pod_alone={err_pod:.4f} train_s={time.perf_counter() - t0:.1f}", flush=True)
        return
    t0 = time.perf_counter()
    model, losses = kp.train_phase1(model, coords, jnp.asarray(train)[..., None], k_p1,
                                    config.phase1)
    t_train = time.perf_counter() - t0
    steps = len(losses)
    marks = sorted({max(1, steps * f // 10) for f in range(1, 11)})
    curve = ", ".join(f"{s}: {np.mean(losses[max(0, s - 10):s]):.4f}" for s in marks)
    print(f"training loss (mean of 10 steps before): {curve}")
    t0 = time.perf_counter()
    err_test = recon_error(model, coords, test, test_raw, mu, sd)
    err_train = recon_error(model, coords, train[:20], train_raw[:20], mu, sd)
    t_eval = time.perf_counter() - t0
    print(f"RESULT set={a.set} steps={steps} recon_test={err_test:.4f} "
          f"recon_train20={err_train:.4f} train_s={t_train:.1f} data_s={t_data:.1f} "
          f"eval_s={t_eval:.1f}", flush=True)


if __name__ == "__main__":
    main()
