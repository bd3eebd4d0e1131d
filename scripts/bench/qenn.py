"""Benchmark: the OOD detectors of jaxsci.generative.qenn against NumPy / scikit-learn
(and pytorch-ood, when installed) on the same features.

One seed of the digits task (:func:`jaxsci.data.vision.digits_complex`, digits 0-5 in
distribution): a cross-entropy MLP and the two QENN views are trained with
:func:`jaxsci.generative.qenn.train`; then every detector scores the *same* logits,
features and masses, in jaxsci (jitted, after warm-up; compile time reported apart)
and in the peer:

* MSP and energy on the logits (peer: ``scipy.special.softmax`` / ``logsumexp``);
* Mahalanobis with a tied covariance on the 32-d features (peer: class means in NumPy,
  ``sklearn.covariance.EmpiricalCovariance`` on the centred features, its
  ``mahalanobis``);
* the quantum evidence (4n) of both views and their GQECR fusion (peer: the same
  formulas in NumPy);
* AUROC (peer: ``sklearn.metrics.roc_auc_score``).

For timing, the test and OOD rows are tiled to ``--rows`` rows (scores are unchanged by
tiling; AUROC is computed on the original rows). pytorch-ood's ``MaxSoftmax``,
``EnergyBased`` and ``Mahalanobis`` run on the same arrays when ``pytorch_ood`` and
``torch`` import; otherwise that peer is skipped with the pip line.

    python scripts/bench/qenn.py [--rows 100000] [--steps 300]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxsci.data import vision
from jaxsci.generative import qenn as Q


def _timed(fn, *args, reps=5):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    best = float(np.median(times))
    return best, max(first - best, 0.0)


def train_models(steps, key):
    d = vision.digits_complex(key)
    k = d.num_classes
    tc = Q.TrainConfig(steps=steps, batch_size=128)
    mlp = Q.RealMLP(d.train_real.shape[1], k, rngs=nnx.Rngs(0))
    m_gd, m_p = nnx.split(mlp)
    ce = lambda p, xb, yb, s: optax.softmax_cross_entropy_with_integer_labels(  # noqa: E731
        nnx.merge(m_gd, p)(xb), yb).mean()
    mlp = nnx.merge(m_gd, jax.jit(lambda p: Q.train(p, ce, d.train_real, d.train_labels,
                                                     jax.random.key(1), tc)[0])(m_p))
    views = [Q.amplitude_phase_views(a) for a in (d.train, d.test, d.ood)]
    q_gd, _ = nnx.split(Q.QENN(64, k, rngs=nnx.Rngs(0)))

    def fit(x, kk):
        p = nnx.state(Q.QENN(64, k, rngs=nnx.Rngs(kk)))
        loss = lambda p, xb, yb, s: Q.qenn_loss(nnx.merge(q_gd, p), xb, yb,  # noqa: E731
                                                copies=2.0)
        return Q.train(p, loss, x, d.train_labels, kk, tc)[0]

    qp = jax.jit(jax.vmap(fit))(views[0], jax.random.split(jax.random.key(2), 2))
    psi, states = [], []
    for split in (1, 2):
        psi.append(jax.vmap(lambda p, x: nnx.merge(q_gd, p)(x))(qp, views[split]))
    states = jax.vmap(lambda p: nnx.merge(q_gd, p).states())(qp)
    return d, mlp, psi, states


def numpy_side(logits, feats, train_feats, train_labels, psi, states, k):
    from scipy.special import logsumexp, softmax
    from sklearn.covariance import EmpiricalCovariance

    out = {}
    t0 = time.perf_counter()
    out["msp"] = -softmax(logits, -1).max(-1)
    out["msp_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["energy"] = -logsumexp(logits, -1)
    out["energy_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    means = np.stack([train_feats[train_labels == c].mean(0) for c in range(k)])
    cov = EmpiricalCovariance(assume_centered=True).fit(train_feats - means[train_labels])
    out["maha_fit_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["mahalanobis"] = np.min([cov.mahalanobis(feats - means[c]) for c in range(k)], 0)
    out["maha_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    masses = []
    for v in range(2):
        amp = psi[v] @ np.conj(states[v])
        p = np.abs(amp) ** 2
        resid = np.linalg.norm(psi[v] - amp @ states[v].T, axis=-1) ** 2
        single = p ** 2
        masses.append(np.concatenate([single, (resid + (p - single).sum(-1))[:, None]], -1))
    e = masses[0][:, -1] * masses[1][:, -1]
    agree = masses[0][:, :-1] * masses[1][:, :-1]
    out["fused_empty"] = e
    out["fused_single"] = agree * ((1 - e) / agree.sum(-1))[:, None]
    out["evidence_s"] = time.perf_counter() - t0
    return out


def torch_ood_side(logits, feats, train_feats, train_labels):
    try:
        import torch
        from pytorch_ood.detector import EnergyBased, Mahalanobis, MaxSoftmax
    except ImportError:
        print("pytorch-ood: skipped (not installed). To compare with it: "
              "pip install pytorch-ood torch")
        return None
    out = {}
    lg, f = torch.as_tensor(logits), torch.as_tensor(feats)
    t0 = time.perf_counter()
    out["msp"] = MaxSoftmax(None).score(lg).numpy()
    out["msp_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["energy"] = EnergyBased(None).score(lg).numpy()
    out["energy_s"] = time.perf_counter() - t0
    det = Mahalanobis(None)
    t0 = time.perf_counter()
    det.fit_features(torch.as_tensor(train_feats), torch.as_tensor(train_labels))
    out["maha_fit_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["mahalanobis"] = det.predict_features(f).numpy()
    out["maha_s"] = time.perf_counter() - t0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    d, mlp, psi, states = train_models(args.steps, jax.random.key(0))
    k = d.num_classes
    lg_id, lg_od = mlp(d.test_real), mlp(d.ood_real)
    f_id, f_od = mlp.features(d.test_real), mlp.features(d.ood_real)
    f_tr = mlp.features(d.train_real)
    n_id = lg_id.shape[0]
    reps = -(-args.rows // (n_id + lg_od.shape[0]))

    def tile(a, b):
        return jnp.tile(jnp.concatenate([a, b]), (reps,) + (1,) * (a.ndim - 1))

    logits, feats = tile(lg_id, lg_od), tile(f_id, f_od)
    psis = jnp.stack([tile(psi[0][v], psi[1][v]) for v in range(2)])
    n_rows = logits.shape[0]

    msp = jax.jit(Q.msp_score)
    energy = jax.jit(Q.energy_score)
    maha_fit = jax.jit(lambda f, y: Q.mahalanobis_fit(f, y, k, ridge=0.0))
    maha = jax.jit(Q.mahalanobis_score)
    evid = jax.jit(lambda p, s: Q.fuse(jax.vmap(lambda a, b: Q.quantum_masses(a, b, 2.0))(p, s)))
    j = {}
    j["msp_s"], j["msp_c"] = _timed(msp, logits)
    j["energy_s"], j["energy_c"] = _timed(energy, logits)
    j["maha_fit_s"], j["maha_fit_c"] = _timed(maha_fit, f_tr, d.train_labels)
    means, prec = maha_fit(f_tr, d.train_labels)
    j["maha_s"], j["maha_c"] = _timed(maha, feats, means, prec)
    j["evidence_s"], j["evidence_c"] = _timed(evid, psis, states)
    scores = {"msp": msp(logits), "energy": energy(logits),
              "mahalanobis": maha(feats, means, prec), "qenn_fused": evid(psis, states)[:, -1]}

    npy = numpy_side(*(np.asarray(a) for a in (logits, feats, f_tr, d.train_labels, psis,
                                               states)), k)
    tood = torch_ood_side(*(np.asarray(a) for a in (logits, feats, f_tr, d.train_labels)))
    n_orig = n_id + lg_od.shape[0]

    def auc_pair(s):
        s = np.asarray(s)[:n_orig]
        ja = float(Q.auroc(s[:n_id], s[n_id:]))
        from sklearn.metrics import roc_auc_score

        sk = roc_auc_score(np.r_[np.zeros(n_id), np.ones(n_orig - n_id)], s)
        return ja, sk

    print(f"digits (one seed, {args.steps} steps), scores timed on {n_rows} rows; "
          f"jax {jax.__version__}, device {jax.devices()[0].device_kind}")
    print("| detector | AUROC jaxsci | AUROC sklearn | jaxsci s | compile s | NumPy/sklearn s "
          "| ratio (peer / jaxsci) | pytorch-ood s |")
    print("|---|---|---|---|---|---|---|---|")
    rows = (("MSP", "msp", "msp_s"), ("energy", "energy", "energy_s"),
            ("Mahalanobis fit", None, "maha_fit_s"), ("Mahalanobis score", "mahalanobis",
                                                      "maha_s"),
            ("quantum evidence + GQECR", "qenn_fused", "evidence_s"))
    for label, key, tkey in rows:
        if key is not None:
            ja, sk = auc_pair(scores[key])
            peer = npy["fused_empty"] if key == "qenn_fused" else npy[key]
            np.testing.assert_allclose(np.asarray(scores[key]), peer, rtol=2e-3, atol=2e-4)
            auc = f"{ja:.4f} | {sk:.4f}"
        else:
            auc = "- | -"
        ctime = j[tkey.replace("_s", "_c")]
        tt = f"{tood[tkey]:.4f}" if tood is not None and tkey in tood else "-"
        print(f"| {label} | {auc} | {j[tkey]:.4f} | {ctime:.2f} | {npy[tkey]:.4f} | "
              f"{npy[tkey] / max(j[tkey], 1e-9):.1f}x | {tt} |")


if __name__ == "__main__":
    main()
