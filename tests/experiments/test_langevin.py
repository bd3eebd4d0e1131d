import pytest

from jaxsci.core import apply_overrides
from jaxsci.dynamics import langevin as lg
from jaxsci.experiments import langevin as E


def test_config_validation():
    with pytest.raises(ValueError, match="taus must be strictly increasing"):
        E.LangevinConfig(taus=(0.5, 0.1))
    with pytest.raises(ValueError, match="taus must be a multiple of dt"):
        E.LangevinConfig(taus=(0.015,))
    with pytest.raises(ValueError, match="systems"):
        E.LangevinConfig(systems=("lorenz",))
    with pytest.raises(ValueError, match="diffusion_mode"):
        E.LangevinConfig(diffusion_mode="guess")
    with pytest.raises(ValueError, match="burn_in must be a multiple of dt"):
        E.LangevinConfig(burn_in=0.005)
    with pytest.raises(ValueError, match="n_bridges must be >= 1"):
        E.LangevinConfig(em=lg.EMConfig(n_bridges=0))
    with pytest.raises(ValueError, match="basis"):
        E.LangevinConfig(basis="chebyshev")
    with pytest.raises(ValueError, match="select"):
        E.LangevinConfig(em=lg.EMConfig(select="best"))


def test_config_nests_the_library_em_config():
    # One owner per number: the EM settings are the library's EMConfig, overridable
    # with dotted --set paths; the bridge steps grow with tau above em.n_steps.
    c = apply_overrides(E.CONFIGS["quick"], ["em.n_iter=3", "em.prior_var=2.5"])
    assert isinstance(c.em, lg.EMConfig)
    assert (c.em.n_iter, c.em.prior_var) == (3, 2.5)
    assert c.em.n_bridges == lg.EMConfig().n_bridges
    assert [c.bridge_steps(t) for t in c.taus] == [4, 4, 10]
    assert all(isinstance(E.SYSTEMS[s](), lg.AbstractDrift) for s in c.systems)
