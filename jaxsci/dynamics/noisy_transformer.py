r"""Deep random Transformers: tokens on the sphere driven by a common matrix Brownian noise.

Paper: "... we analyze deep Transformers where noise arises from the random
initialization of value matrices ... tokens are driven by a *common* matrix-valued
Brownian noise ... For two tokens, we prove a phase transition governed by the
interaction strength and the token dimension" (ICML 2026).

Layers
------
Tokens ``x_1..x_n`` are unit vectors in R^d (token-wise RMS normalisation puts
them on the sphere of radius ``sqrt d``; we work on the unit sphere, which only
rescales ``beta``). With ``m_i = sum_j softmax_j(beta <x_i, x_j>) x_j`` and the value
matrix ``V = h gamma I + sqrt(h) sigma G``, ``G`` a ``d x d`` standard Gaussian matrix
shared by all tokens and fresh in every layer, one layer is

.. math::  x_i \leftarrow \frac{x_i + h\gamma m_i + \sqrt h\,\sigma G m_i}
                                 {|x_i + h\gamma m_i + \sqrt h\,\sigma G m_i|}.

Diffusion limit: Ito, with a geometric correction (derivation)
--------------------------------------------------------------
Write ``a = h u + sqrt(h) v`` with ``u = gamma m``, ``v = sigma G m`` and ``|x| = 1``.
Then ``|x + a|^2 = 1 + eps`` with ``eps = 2<x, a> + |a|^2`` and
``(1 + eps)^{-1/2} = 1 - eps/2 + 3 eps^2/8 + O(eps^3)``. Keeping terms to order ``h``
(``v = O(1)`` so ``sqrt(h) v`` contributes at order ``h`` through its square):
``eps = 2 sqrt(h) <x,v> + h (2<x,u> + |v|^2) + O(h^{3/2})``, ``eps^2 = 4 h <x,v>^2 + ...``,

.. math::

    x' - x = a - x\,\tfrac{\varepsilon}{2} - a\,\tfrac{\varepsilon}{2}
             + \tfrac38 x\,\varepsilon^2 + O(h^{3/2})
           = \sqrt h\,P_x v + h\big[P_x u - \tfrac12 |P_x v|^2 x - \langle x, v\rangle P_x v\big]
             + O(h^{3/2}),

using ``|v|^2 = |P_x v|^2 + <x,v>^2`` and ``<x,v> v = <x,v> P_x v + <x,v>^2 x``
(``P_x = I - x x^T``). ``G`` is independent of the current tokens and
``E[G m m'^T G^T] = <m, m'> I``, so ``E[v v^T] = sigma^2 |m|^2 I``:
``E|P_x v|^2 = (d-1) sigma^2 |m|^2`` and ``E[<x,v> P_x v] = sigma^2 |m|^2 P_x x = 0``.
The increment's mean over one layer is therefore ``h b_i + O(h^{3/2})`` and its
covariance ``h sigma^2 <m_i, m_j> P_{x_i} P_{x_j} + O(h^{3/2})``, and the layers
converge (``h -> 0``, ``t = k h``) to the **Ito** SDE

.. math::

    dx_i = \Big[\gamma P_{x_i} m_i - \frac{d-1}{2}\,\sigma^2 |m_i|^2 x_i\Big] dt
           + \sigma P_{x_i}\, dW\, m_i ,

``W`` a ``d x d`` matrix of independent Brownian motions common to all tokens. The
radial term ``-(d-1)/2 sigma^2 |m_i|^2 x_i`` comes from the normalisation acting on the
quadratic variation of the tangential noise; it is exactly what keeps ``|x_i| = 1``
under Ito's formula (``d|x|^2 = 2<x, dx> + |P dW m|^2 = 0``). It is *not* the
Stratonovich equation ``dx_i = gamma P m_i dt + sigma P_{x_i} o dW m_i``: that one's
Ito form has the same radial term (from differentiating ``P_x``) but also
``(sigma^2/2) sum_ab P_{x_i} e_a d m_{i,b}[f_ab]``, terms with the attention's
Jacobian (``m_i`` depends on every ``x_j``, which the same ``W`` moves), which the
layer does not produce: ``G`` multiplies ``m_i`` evaluated *before* the step
(non-anticipating, Ito), only the normalisation sees the end of the step.
``layer_increment_moments`` / :func:`sde_coefficients` check this numerically.

Two tokens
----------
``rho = <x_1, x_2>``; by symmetry ``m_1 = p x_1 + q x_2``, ``m_2 = q x_1 + p x_2`` with
``p = 1 / (1 + e^{beta (rho - 1)})``, ``q = 1 - p``. Ito's formula on the SDE above,
with ``<P_1 dW m_1, P_2 dW m_2> = sigma^2 <m_1, m_2> tr(P_1 P_2) dt``,
``tr(P_1 P_2) = d - 2 + rho^2`` and the noise ``sigma <dW, u m_1^T + w m_2^T>_F``
(``u = x_2 - rho x_1``, ``w = x_1 - rho x_2``), gives a closed 1-D SDE (the law of
``W`` is rotation invariant, so ``rho`` is Markov on its own):

.. math::

    d\rho = (1-\rho^2)\big[2\gamma q + \sigma^2\big(2(d-2)pq - (p^2+q^2)\rho\big)\big] dt
            + \sigma\sqrt{2(p^2+q^2)}\,(1-\rho^2)\, dB .

Both ``rho = +-1`` are absorbing. In ``z = atanh(rho)`` the drift over half the
squared diffusion is regular, and the scale density is
``s(rho) = exp(-int k/(sigma^2 (p^2+q^2)(1-rho^2)))`` with
``k = 2 gamma q + sigma^2 (2(d-2)pq - (p^2+q^2) rho)``, so

* ``P(rho -> -1) = int_{rho_0}^1 s / int_{-1}^1 s`` (:func:`p_antipodal`);
* ``-1`` is attracting (``s`` integrable there) iff ``k(-1) < 2 sigma^2 (p^2+q^2)``,
  i.e. with ``t = e^{-2 beta}``: ``(sigma^2 - 2 gamma) t^2 - 2 (gamma + (d-2) sigma^2) t
  + sigma^2 > 0``, i.e. ``beta > beta_c = -(1/2) log t_c`` with
  ``t_c = sigma^2 / (B + sqrt(B^2 - (sigma^2 - 2 gamma) sigma^2))``,
  ``B = gamma + (d-2) sigma^2`` (:func:`critical_beta`). For ``gamma = 0``:
  ``beta_c = (1/2) arccosh(d - 2)`` (0 for ``d <= 3``): the transition in the
  interaction strength *and* the dimension;
* ``+1`` (collapse) is always attracting: its Lyapunov exponent is
  ``-2 gamma - (d-1) sigma^2 < 0``;
* without noise (``sigma = 0``) ``d rho = 2 gamma q (1-rho^2) dt > 0``: collapse.

Transformations
---------------
Every number a researcher sweeps is traced (``jit``/``vmap``): ``beta``, ``gamma``,
``sigma``, the layer step ``h`` (the layer count ``n_layers`` is the static number),
``rho0`` of :func:`two_tokens` and :func:`p_antipodal`, ``d`` of the closed forms
(:func:`critical_beta`, :func:`p_antipodal`, :func:`rho_coefficients`), ``t1``/``dt``
of :func:`solve_sde` when ``max_steps`` is given. Solvers are values (``solver=
diffrax.Euler()`` or any diffrax SDE solver). Reverse-mode gradients:
:func:`run_layers` (for a fixed key) in ``x0``, ``h``, ``beta``, ``gamma``, ``sigma``;
:func:`solve_sde` (diffrax's ``RecursiveCheckpointAdjoint``); the closed forms
:func:`p_antipodal` and :func:`critical_beta`. :func:`antipodal_formation` is a
boolean (no gradient). Value checks (tokens on the sphere, ``beta >= 0``,
``sigma >= 0``, ``h > 0``) fire also inside ``jit``/``vmap``; array-likes are accepted.

>>> import jax
>>> from jaxsci.dynamics import noisy_transformer as nt
>>> x0 = nt.two_tokens(0.0, 4)
>>> out = nt.run_layers(jax.random.key(0), x0, 100, 0.01, 2.0, 1.0, 1.0)
>>> out.final.shape
(2, 4)
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jaxtyping import Array, Float

from jaxsci.core.sphere import normalize, project_tangent
from jaxsci.core.validation import check_array, check_choice, check_int, check_key, check_scalar

__all__ = [
    "NOISES",
    "LayerPath",
    "attention_mean",
    "layer",
    "sample_noise",
    "run_layers",
    "layers_from_brownian",
    "drift",
    "diffusion",
    "sde_coefficients",
    "solve_sde",
    "two_tokens",
    "rho_coefficients",
    "two_token_terms",
    "boundary_exponents",
    "critical_beta",
    "p_antipodal",
    "antipodal_formation",
]

Noise = Literal["full", "span"]
NOISES = ("full", "span")


# --------------------------------------------------------------------------- layers


def attention_mean(x: Float[Array, "n d"], beta) -> Float[Array, "n d"]:
    """``m_i = sum_j softmax_j(beta <x_i, x_j>) x_j``."""
    return jax.nn.softmax(beta * (x @ x.T), axis=-1) @ x


def layer(
    x: Float[Array, "n d"], gm: Float[Array, "n d"], h, beta, gamma, sigma
) -> Float[Array, "n d"]:
    """One normalised layer given the noise ``gm = G m`` (rows ``G m_i``), see module doc.

    ``gm`` must be ``G`` applied to :func:`attention_mean` ``(x, beta)``; use
    :func:`run_layers` unless you build ``G`` yourself.
    """
    m = attention_mean(x, beta)
    y = x + h * gamma * m + jnp.sqrt(h) * sigma * gm
    return normalize(y)


def sample_noise(key: jax.Array, x: Float[Array, "n d"], m: Float[Array, "n d"],
                 noise: Noise = "full") -> Float[Array, "n d"]:
    """Rows ``G m_i`` for one standard Gaussian ``d x d`` matrix ``G`` shared by the tokens.

    ``"full"`` draws all of ``G``. ``"span"`` is equal in law and cheaper when
    ``n < d``: every ``m_i`` lies in ``span(x_1..x_n)``, so with an orthonormal basis
    ``Q`` (``d x n``, Householder QR, orthonormal even when the tokens are dependent)
    ``G m_i = (G Q)(Q^T m_i)`` and ``G Q`` has independent standard Gaussian entries.
    """
    n, d = x.shape
    if noise == "span" and n < d:
        q, _ = jnp.linalg.qr(x.T)  # (d, n)
        gq = jax.random.normal(key, (d, n), x.dtype)
        return (m @ q) @ gq.T
    g = jax.random.normal(key, (d, d), x.dtype)
    return m @ g.T


class LayerPath(NamedTuple):
    """Output of :func:`run_layers` / :func:`layers_from_brownian`."""

    ts: Float[Array, " s"]
    xs: Float[Array, "s n d"]
    final: Float[Array, "n d"]


def run_layers(
    key: jax.Array,
    x0: Float[Array, "n d"],
    n_layers: int,
    h: float,
    beta,
    gamma,
    sigma,
    *,
    n_save: int = 1,
    noise: Noise = "full",
) -> LayerPath:
    """``n_layers`` random layers (fresh ``G`` each) from ``x0``; time ``t = k h``.

    Args:
      key: PRNG key (one fresh ``G`` per layer).
      x0: ``(n, d)`` tokens on the unit sphere (array-like).
      n_layers: number of layers (static: a loop count).
      h: layer step (traced); ``t = n_layers * h`` at the end.
      beta, gamma, sigma: interaction strength, deterministic and noise parts of ``V``
        (traced).
      n_save: saved states (static). noise: ``"full"`` or ``"span"`` (equal in law).

    Returns:
      :class:`LayerPath`. Jittable and vmappable over ``key``, ``x0``, ``h``, ``beta``,
      ``gamma``, ``sigma``; reverse-mode differentiable in all but ``key``.
    """
    check_key("key", key)
    x0 = _check_tokens(x0)
    n_layers = check_int("n_layers", n_layers, min=1)
    check_scalar("h", h, gt=0.0)
    _check_params(beta, gamma, sigma)
    x0, h = _traced_checks(x0, beta, sigma, h)
    n_save = min(check_int("n_save", n_save, min=1), n_layers)
    check_choice("noise", noise, NOISES)
    return _run_layers(key, x0, n_layers, h, beta, gamma, sigma, n_save, noise)


@eqx.filter_jit
def _run_layers(key, x0, n_layers, h, beta, gamma, sigma, n_save, noise):
    # Module-level jit: a second call compiles nothing (the scan bodies' closures).
    per, rest = divmod(n_layers, n_save)
    h_arr = jnp.asarray(h, x0.dtype)

    def step(x, k):
        m = attention_mean(x, beta)
        gm = sample_noise(k, x, m, noise)
        return normalize(x + h_arr * gamma * m + jnp.sqrt(h_arr) * sigma * gm), None

    def block(x, k):
        x, _ = jax.lax.scan(step, x, jax.random.split(k, per))
        return x, x

    k_blocks, k_rest = jax.random.split(key)
    x, xs = jax.lax.scan(block, x0, jax.random.split(k_blocks, n_save))
    if rest:
        x, _ = jax.lax.scan(step, x, jax.random.split(k_rest, rest))
        xs = xs.at[-1].set(x)
    ts = h_arr * per * jnp.arange(1, n_save + 1, dtype=x0.dtype)
    ts = ts.at[-1].set(h_arr * n_layers)
    return LayerPath(jnp.concatenate([jnp.zeros((1,), x0.dtype), ts]),
                     jnp.concatenate([x0[None], xs]), x)


def layers_from_brownian(
    bm: diffrax.AbstractBrownianPath,
    x0: Float[Array, "n d"],
    t1: float | None,
    h: float,
    beta,
    gamma,
    sigma,
    *,
    n_layers: int | None = None,
) -> Float[Array, "n d"]:
    """The layers driven by a given ``d x d`` Brownian path: ``sqrt(h) G_k = W(t_{k+1}) - W(t_k)``.

    Couples the discrete network with :func:`solve_sde` on the same path (strong
    convergence as ``h -> 0``). The layer count is ``round(t1 / h)`` (concrete ``t1``
    and ``h``), or ``n_layers`` when given (then ``t1`` may be ``None`` and ``h`` is
    traced: vmap over step sizes at a fixed depth).
    """
    x0 = _check_tokens(x0)
    check_scalar("h", h, gt=0.0)
    _check_params(beta, gamma, sigma)
    if n_layers is None:
        if t1 is None:
            raise ValueError("layers_from_brownian needs t1 or n_layers")
        if isinstance(t1, jax.core.Tracer) or isinstance(h, jax.core.Tracer):
            raise TypeError("t1 and h are traced, but the layer count round(t1 / h) is a "
                            "loop length: pass n_layers= (static)")
        check_scalar("t1", t1, gt=0.0)
        n_layers = max(1, int(round(float(t1) / float(h))))
    n_layers = check_int("n_layers", n_layers, min=1)
    x0, h = _traced_checks(x0, beta, sigma, h)

    def step(x, k):
        t0 = k * h
        dw = bm.evaluate(t0, t0 + h)
        m = attention_mean(x, beta)
        return normalize(x + h * gamma * m + sigma * m @ dw.T), None

    x, _ = jax.lax.scan(step, x0, jnp.arange(n_layers, dtype=x0.dtype))
    return x


# --------------------------------------------------------------------------- SDE


def drift(x: Float[Array, "n d"], beta, gamma, sigma) -> Float[Array, "n d"]:
    """Ito drift ``gamma P_{x_i} m_i - (d-1)/2 sigma^2 |m_i|^2 x_i``."""
    d = x.shape[-1]
    m = attention_mean(x, beta)
    m2 = jnp.sum(m * m, -1, keepdims=True)
    return gamma * project_tangent(x, m) - 0.5 * (d - 1) * sigma**2 * m2 * x


def diffusion(x: Float[Array, "n d"], beta, sigma) -> lx.FunctionLinearOperator:
    """The linear map ``dW -> (sigma P_{x_i} dW m_i)_i`` from ``d x d`` to ``n x d``."""
    m = attention_mean(x, beta)
    d = x.shape[-1]

    def apply(dw):
        return sigma * project_tangent(x, m @ dw.T)

    return lx.FunctionLinearOperator(apply, jax.ShapeDtypeStruct((d, d), x.dtype))


def sde_coefficients(x: Float[Array, "n d"], beta, gamma, sigma):
    """Drift ``(n, d)`` and diffusion covariance ``(n, d, n, d)`` of the limit SDE at ``x``.

    ``Cov(dx_i, dx_j) / dt = sigma^2 <m_i, m_j> P_{x_i} P_{x_j}``. Differentiable.
    """
    x = _check_tokens(x)
    d = x.shape[-1]
    m = attention_mean(x, beta)
    proj = jnp.eye(d) - x[:, :, None] * x[:, None, :]  # (n, d, d)
    cov = sigma**2 * jnp.einsum("ij,iab,jbc->iajc", m @ m.T, proj, proj)
    return drift(x, beta, gamma, sigma), cov


def solve_sde(
    x0: Float[Array, "n d"],
    t1: float,
    dt: float,
    beta,
    gamma,
    sigma,
    *,
    key: jax.Array | None = None,
    bm: diffrax.AbstractBrownianPath | None = None,
    solver: diffrax.AbstractSolver | None = None,
    max_steps: int | None = None,
) -> Float[Array, "n d"]:
    """Solve the limit Ito SDE with diffrax (``Euler``: Euler-Maruyama) to ``t1``.

    The matrix Brownian motion is ``bm`` if given, else a ``VirtualBrownianTree``
    from ``key``. The solution is returned as computed (not renormalised), so
    ``|x_i| - 1`` measures the solver's error. ``max_steps`` (static) bounds the step
    count; by default it is ``round(t1 / dt) + 2`` from concrete ``t1``, ``dt``; give it
    to trace ``t1`` and ``dt`` (vmap over step sizes or horizons). Reverse-mode
    differentiable (diffrax's ``RecursiveCheckpointAdjoint``) in ``x0``, ``beta``,
    ``gamma``, ``sigma``.
    """
    x0 = _check_tokens(x0)
    check_scalar("t1", t1, gt=0.0)
    check_scalar("dt", dt, gt=0.0)
    _check_params(beta, gamma, sigma)
    if max_steps is None:
        if isinstance(t1, jax.core.Tracer) or isinstance(dt, jax.core.Tracer):
            raise TypeError("t1 and dt are traced, but the step budget round(t1 / dt) is "
                            "static: pass max_steps=")
        max_steps = max(1, int(round(float(t1) / float(dt)))) + 2
    max_steps = check_int("max_steps", max_steps, min=1)
    if solver is not None and not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a diffrax solver (e.g. diffrax.Euler()), got "
                        f"{type(solver).__name__}")
    if bm is None:
        if key is None:
            raise ValueError("solve_sde needs key or bm")
        check_key("key", key)
    if solver is None:
        solver = diffrax.Euler()
    return _solve_sde(x0, t1, dt, beta, gamma, sigma, key, bm, solver, max_steps)


@eqx.filter_jit
def _solve_sde(x0, t1, dt, beta, gamma, sigma, key, bm, solver, max_steps):
    # One module-level jit: a second call with same-shaped inputs reuses the compiled
    # solve (the terms' closures below are new at every trace).
    x0, dt = _traced_checks(x0, beta, sigma, dt)
    d = x0.shape[-1]
    if bm is None:
        bm = diffrax.VirtualBrownianTree(0.0, t1, tol=dt / 8, shape=(d, d), key=key)
    terms = diffrax.MultiTerm(
        diffrax.ODETerm(lambda t, y, a: drift(y, beta, gamma, sigma)),
        diffrax.ControlTerm(lambda t, y, a: diffusion(y, beta, sigma), bm),
    )
    sol = diffrax.diffeqsolve(terms, solver, 0.0, t1, dt, x0, max_steps=max_steps,
                              saveat=diffrax.SaveAt(t1=True),
                              adjoint=diffrax.RecursiveCheckpointAdjoint())
    return sol.ys[-1]


# --------------------------------------------------------------------------- two tokens


def two_tokens(rho0: float | Float[Array, ""], d: int, dtype=None) -> Float[Array, "2 d"]:
    """Two unit vectors in R^d with ``<x_1, x_2> = rho0`` (in the (e_1, e_2) plane).

    ``rho0`` is traced (vmap over initial overlaps); ``d`` is a shape. ``dtype``
    defaults to JAX's default float (float64 under ``jax_enable_x64``).
    """
    check_scalar("rho0", rho0, ge=-1.0, le=1.0)
    d = check_int("d", d, min=2)
    dtype = jnp.result_type(float) if dtype is None else dtype
    r = jnp.asarray(rho0, dtype)
    r = eqx.error_if(r, ~((r >= -1) & (r <= 1)), "rho0 must be in [-1, 1]")
    s = jnp.sqrt(jnp.maximum(0.0, 1.0 - r * r))
    x = jnp.zeros((2, d), dtype)
    return x.at[0, 0].set(1.0).at[1, 0].set(r).at[1, 1].set(s)


def _pq(rho, beta):
    p = jax.nn.sigmoid(-beta * (rho - 1.0))  # 1 / (1 + e^{beta (rho - 1)})
    return p, 1.0 - p


def _k(rho, beta, gamma, sigma, d):
    p, q = _pq(rho, beta)
    s = p * p + q * q
    return 2.0 * gamma * q + sigma**2 * (2.0 * (d - 2) * p * q - s * rho), s


def two_token_terms(rho, beta, gamma, sigma, d):
    """``(k, s)`` of the two-token SDE: ``d rho = (1-rho^2) k dt + sigma sqrt(2 s) (1-rho^2) dB``.

    ``k = 2 gamma q + sigma^2 (2 (d-2) p q - s rho)``, ``s = p^2 + q^2`` (module doc);
    the scale function's integrand is ``k / (sigma^2 s (1 - rho^2))``. Traced, elementwise.
    """
    return _k(rho, beta, gamma, sigma, d)


def rho_coefficients(rho, beta, gamma, sigma, d):
    """Drift and diffusion (``d rho = mu dt + varsigma dB``) of the two-token SDE."""
    k, s = _k(rho, beta, gamma, sigma, d)
    one = 1.0 - rho * rho
    return one * k, sigma * jnp.sqrt(2.0 * s) * one


def boundary_exponents(beta, gamma, sigma, d):
    """Lyapunov exponents of ``log(1 + rho)`` at ``-1`` and ``log(1 - rho)`` at ``+1``.

    Negative means the boundary attracts (with positive probability).
    """
    k_m, s_m = _k(-1.0, beta, gamma, sigma, d)
    lam_minus = 2.0 * k_m - 4.0 * sigma**2 * s_m
    lam_plus = -2.0 * gamma - (d - 1) * sigma**2
    return lam_minus, lam_plus


def critical_beta(d, gamma, sigma):
    """``beta_c``: the antipodal state attracts iff ``beta > beta_c`` (see module doc)."""
    check_scalar("gamma", gamma, ge=0.0)
    check_scalar("sigma", sigma, gt=0.0)
    s2 = sigma**2
    a = s2 - 2.0 * gamma
    b = gamma + (jnp.asarray(d, jnp.result_type(float)) - 2.0) * s2
    t_c = s2 / (b + jnp.sqrt(jnp.maximum(b * b - a * s2, 0.0)))
    return jnp.maximum(-0.5 * jnp.log(jnp.minimum(t_c, 1.0)), 0.0)


def p_antipodal(rho0, beta, gamma, sigma, d, *, z_max: float = 12.0, n_grid: int = 4001):
    """``P(rho -> -1)`` from ``rho0`` by the scale function (0 if ``-1`` repels or sigma=0).

    Quadrature in ``z = atanh(rho)`` on ``[-z_max, z_max]`` in log space, with the exact
    exponential tails beyond. Jittable and vmappable over all numeric arguments.
    """
    for name, v in (("beta", beta), ("gamma", gamma)):
        check_scalar(name, v, ge=0.0)
    check_scalar("sigma", sigma, ge=0.0)
    check_scalar("rho0", rho0, ge=-1.0, le=1.0)
    dt_ = jnp.result_type(float)
    z = jnp.linspace(-z_max, z_max, n_grid, dtype=dt_)
    rho = jnp.tanh(z)
    sig = jnp.where(sigma > 0, sigma, 1.0)
    k, s = _k(rho, beta, gamma, sig, d)
    g = k / (sig**2 * s)  # 2 mu / varsigma^2 * d rho / d z
    dz = z[1] - z[0]
    lam = jnp.concatenate([jnp.zeros((1,), dt_), jnp.cumsum(0.5 * (g[1:] + g[:-1]) * dz)])
    # log of s(rho) d rho / dz = exp(-Lambda) (1 - tanh^2 z)
    az = jnp.abs(z)
    ell = -lam + math.log(4.0) - 2.0 * az - 2.0 * jnp.log1p(jnp.exp(-2.0 * az))
    k_m, s_m = _k(-1.0, beta, gamma, sig, d)
    decay_minus = 2.0 - k_m / (sig**2 * s_m)  # ell ~ decay_minus * z as z -> -inf
    k_p, s_p = _k(1.0, beta, gamma, sig, d)
    decay_plus = 2.0 + k_p / (sig**2 * s_p)
    w = jnp.full_like(z, dz).at[0].mul(0.5).at[-1].mul(0.5)
    z0 = jnp.arctanh(jnp.clip(jnp.asarray(rho0, dt_), -1.0 + 1e-12, 1.0 - 1e-12))
    # The integral from z0 up: grid points above z0 count fully, the cell that holds z0
    # in proportion to how much of it lies above (linear in z0), so p is continuous and
    # differentiable in rho0 (a hard indicator would make d p / d rho0 = 0).
    upper = jnp.clip((z - z0) / dz + 0.5, 0.0, 1.0)
    tail_m = ell[0] - jnp.log(jnp.maximum(decay_minus, 1e-30))
    tail_p = ell[-1] - jnp.log(decay_plus)
    log_w = jnp.log(w) + ell
    log_up = jnp.logaddexp(jax.nn.logsumexp(log_w, b=upper), tail_p)
    log_all = jnp.logaddexp(jnp.logaddexp(jax.nn.logsumexp(log_w), tail_p), tail_m)
    p = jnp.exp(log_up - log_all)
    p = jnp.where(decay_minus > 0, p, 0.0)
    return jnp.where(sigma > 0, p, jnp.where(jnp.asarray(rho0) <= -1.0, 1.0, 0.0))


# --------------------------------------------------------------------------- many tokens


def antipodal_formation(x: Float[Array, "n d"], tol: float = 1e-2):
    """True when all tokens sit at two antipodal points ``+-c`` (both occupied)."""
    gram = x @ x.T
    two_points = jnp.all(jnp.abs(gram) > 1.0 - tol)
    return two_points & jnp.any(gram < 0.0)


# --------------------------------------------------------------------------- checks


def _check_tokens(x):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = jnp.asarray(x)
    check_array("x", x, ndim=2, dtype="floating")
    if x.shape[1] < 2:
        raise ValueError(f"x must have d >= 2 columns, got shape {tuple(x.shape)}")
    if not isinstance(x, jax.core.Tracer):
        norms = np.linalg.norm(np.asarray(x, np.float64), axis=-1)
        err = float(np.max(np.abs(norms - 1.0)))
        if err > 1e-4:
            raise ValueError(
                f"x must lie on the unit sphere (row norms 1), got max | |x_i| - 1 | = {err:.3g}"
            )
    return jnp.asarray(x)


def _traced_checks(x, beta, sigma, h):
    """The value checks again, as ``equinox.error_if``: they fire inside jit/vmap."""
    norms = jnp.linalg.norm(x, axis=-1)
    atol = 1e-4 if x.dtype == jnp.float32 else 1e-8
    x = eqx.error_if(x, ~jnp.all(jnp.abs(norms - 1) <= atol),
                     "x must lie on the unit sphere (row norms 1)")
    bad = ~(jnp.asarray(beta) >= 0) | ~(jnp.asarray(sigma) >= 0)
    x = eqx.error_if(x, bad, "beta and sigma must be >= 0 (and not NaN)")
    h = jnp.asarray(h, x.dtype)
    h = eqx.error_if(h, ~(h > 0), "the step h (dt) must be > 0")
    return x, h


def _check_params(beta, gamma, sigma):
    check_scalar("beta", beta, ge=0.0)
    check_scalar("gamma", gamma)
    check_scalar("sigma", sigma, ge=0.0)
