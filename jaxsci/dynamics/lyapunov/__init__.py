"""Neural vector Lyapunov-Razumikhin certificates for delayed interconnected systems.

Paper: "Neural Vector Lyapunov-Razumikhin Certificates for Delayed Interconnected
Systems" (Zhou, Wang, Yang; ICML 2026).

* :mod:`.systems` -- discrete-time interconnected systems with bounded time-varying
  delays (platoon, drone formation, microgrid, your own), simulation.
* :mod:`.certificates` -- one neural ``V_i`` per subsystem, the gain matrix, and the
  sISS condition (stated in that module's docstring) as bound-able programs.
* :mod:`jaxsci.common.bounds` (the shared layer) -- IBP and CROWN linear bounds of
  small programs over boxes, with floating-point rounding accounted for.
* :mod:`.verify` -- compositional branch-and-bound verification (one subsystem at a
  time, plus the gain condition).
* :mod:`.train` -- counterexample-guided synthesis (optax).
* :mod:`.quadratic` -- exact proofs for quadratic certificates (S-procedure), and their
  LMI design for switching delays (:func:`~.systems.delay_modes`).
* :mod:`.falsify` -- trajectory counterexamples (runs that refute a stability claim).
"""

from jaxsci.dynamics.lyapunov import certificates, falsify, quadratic, systems, train, verify
from jaxsci.dynamics.lyapunov.certificates import (
    Certificate,
    Reach,
    gain_matrix,
    gain_report,
    init_certificate,
    quadratic_certificate,
    value,
    values,
)
from jaxsci.dynamics.lyapunov.falsify import TrajectoryCounterexample
from jaxsci.dynamics.lyapunov.systems import (
    InterconnectedSystem,
    constant_delay,
    delay_modes,
    drone_formation,
    input_layout,
    linear_chain,
    linear_network,
    microgrid,
    monolithic,
    platoon,
    random_delays,
    simulate,
)
from jaxsci.dynamics.lyapunov.train import SynthesisConfig, estimate_reach, synthesize
from jaxsci.dynamics.lyapunov.verify import VerifyConfig, verify_modes, verify_subsystem

__all__ = [
    "certificates",
    "falsify",
    "quadratic",
    "systems",
    "train",
    "verify",
    "Certificate",
    "Reach",
    "InterconnectedSystem",
    "SynthesisConfig",
    "TrajectoryCounterexample",
    "VerifyConfig",
    "constant_delay",
    "delay_modes",
    "drone_formation",
    "estimate_reach",
    "gain_matrix",
    "gain_report",
    "init_certificate",
    "input_layout",
    "linear_chain",
    "linear_network",
    "microgrid",
    "monolithic",
    "platoon",
    "quadratic_certificate",
    "random_delays",
    "simulate",
    "synthesize",
    "value",
    "values",
    "verify_modes",
    "verify_subsystem",
]
