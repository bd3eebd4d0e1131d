import json

import numpy as np
import pytest

from jaxsci.experiments import dflash as exp


@pytest.fixture(scope="module")
def smoke(run_experiment):
    return run_experiment(exp, "smoke")


def test_smoke_writes_every_metric_finite(smoke, assert_finite_metrics):
    out, m = smoke
    assert_finite_metrics(m, exp.METRIC_KEYS)
    cfg = exp.CONFIGS["smoke"]
    grid = (len(cfg.tasks), len(cfg.block_sizes))
    for key in ("mean_acceptance_length_block", "mean_acceptance_length_ar",
                "tokens_per_second_block", "speedup_block", "target_forward_passes_ar"):
        assert np.asarray(m[key]).shape == grid, key
    # Losslessness does not depend on how well the (barely trained) drafters draft.
    assert m["lossless_greedy"] == 1.0
    # tau is between 1 (nothing accepted) and B (everything); the target alone makes one
    # pass per token, speculative decoding at most one.
    tau = np.asarray(m["mean_acceptance_length_block"])
    assert np.all((tau >= 1.0) & (tau <= np.asarray(cfg.block_sizes)))
    assert np.allclose(m["target_forward_passes_target"], 1.0)
    assert np.all(np.asarray(m["target_forward_passes_block"]) <= 1.0)
    for png in ("acceptance.png", "speed.png"):
        assert (out / png).stat().st_size > 2_000, png
    assert "Sampling mode" in (out / "report.md").read_text()


def test_config_validation():
    with pytest.raises(ValueError, match="block_sizes\\[i\\] must be <= 8"):
        exp.DFlashConfig(block_sizes=(4, 16)).validate()  # beyond the training block
    with pytest.raises(ValueError, match="draft_temperatures\\[i\\] must be >= 0"):
        exp.DFlashConfig(draft_temperatures=(-1.0,)).validate()
    with pytest.raises(ValueError, match="sampling_task must be one of"):
        exp.DFlashConfig(tasks=("grammar",), sampling_task="recall").validate()
    with pytest.raises(ValueError, match="prompt_buffer must be <= 64"):
        exp.DFlashConfig(prompt_buffer=100).validate()


@pytest.mark.reproduce
def test_quick_block_drafter_is_lossless_and_accepts_more_per_draft_pass(tmp_path):
    exp.run(exp.CONFIGS["quick"], tmp_path, progress=False)
    m = json.loads((tmp_path / "metrics.json").read_text())
    cfg = exp.CONFIGS["quick"]
    # Greedy: every output equals the target's own greedy output.
    assert m["lossless_greedy"] == 1.0
    # Sampling: the first K tokens are distributed as the target's (no detectable
    # difference), while the same test rejects the biased resampling rule.
    assert m["sampling_chi2_pvalue"] > cfg.sampling_alpha
    assert m["sampling_biased_chi2_pvalue"] < cfg.sampling_alpha
    # The paper's trend: at equal drafting cost (one drafter pass per round, drafters of
    # the same size), the block drafter's acceptance length beats the autoregressive
    # drafter's, averaged over the tasks (as the paper's headline averages its
    # benchmarks), at every block size.
    tau_block = np.asarray(m["mean_acceptance_length_block_avg"])
    assert np.all(tau_block > m["mean_acceptance_length_ar_equal_cost_avg"])
    # Fewer target passes than tokens: the block drafter's drafts are accepted.
    assert np.all(np.asarray(m["target_forward_passes_block"]) < 1.0)
