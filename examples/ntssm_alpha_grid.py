"""Train a grid of NT-SSM type weights in one compiled program and rank them by Recall@20."""

import jax

from jaxsci.common import ranking
from jaxsci.core import TrainConfig
from jaxsci.data import recsys
from jaxsci.recsys import ntssm

data = recsys.community_interactions(jax.random.key(0), n_users=400, n_items=300,
                                     mean_degree=20.0)
graph = ntssm.bipartite_graph(data.users, data.items, data.n_users, data.n_items)

# Five settings of alpha_uu (the others at the paper's values): one LightGCN each.
grid = [ntssm.TypeWeights(uu=a, ii=0.8, ui=0.8, iu=1.0) for a in (0.8, 1.0, 1.2, 1.4, 1.6)]
config = ntssm.NTSSMConfig(dim=32, batch_size=256, learning_rate=1e-2)
steps = 15 * (data.n_train // config.batch_size)  # 15 epochs
fit = ntssm.train_grid(jax.random.key(1), graph, ntssm.TypeWeights.stack(grid), config,
                       seeds=[0] * len(grid), train_config=TrainConfig(steps=steps))

pop = ranking.evaluate_embeddings(jax.numpy.tile(data.popularity, (data.n_users, 1)),
                                  jax.numpy.eye(data.n_items), data.train, data.test)
print(f"popularity ranking: Recall@20 {float(pop['recall@20']):.4f}")
for g, w in enumerate(grid):
    parts = fit.model(g)(graph)
    m = ranking.evaluate_embeddings(parts.users(), parts.items(), data.train, data.test)
    print(f"alpha_uu = {float(w.uu):.1f}: Recall@20 {float(m['recall@20']):.4f}  "
          f"NDCG@20 {float(m['ndcg@20']):.4f}")
