"""One RSIR round: train SASRec, generate filtered trajectories, retrain on the union."""

import jax

from jaxsci.data import recsys
from jaxsci.recsys import rsir

data = recsys.clustered_sequences(jax.random.key(0), n_users=200, n_items=150)
config = rsir.SASRecConfig(dim=32, steps=300, learning_rate=2e-3)
model, _ = rsir.train(jax.random.key(1), data.train, data.n_items, config)
print("round 0:", rsir.evaluate(model, data.train, data.lengths, data.test))

traj = rsir.generate(rsir.SASRecScorer(model), data.train, data.lengths, jax.random.key(2),
                     rsir.GenerateConfig(m=5, k=20, local_prob=0.7), n_items=data.n_items)
kept = rsir.accepted_trajectories(traj)
print(f"{len(kept)} distinct trajectories kept of {traj.lengths.shape[0]}; "
      f"{float(traj.stopped_by_filter.mean()):.0%} stopped by the fidelity rule")

rows, n_valid = rsir.augment(data.train, kept, capacity=data.n_users * 6)
successor, _ = rsir.train(jax.random.key(1), rows, data.n_items, config, n_valid=n_valid)
print("round 1:", rsir.evaluate(successor, data.train, data.lengths, data.test))
