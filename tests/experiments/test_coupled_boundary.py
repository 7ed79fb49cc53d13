"""The closed-form boundary of coupled verification against the model's own goodputs."""

import numpy as np

from multispin.experiments.coupled_boundary import coupled_wins, plot_boundary, token_loss
from multispin.optimize.goodput import SAAObjective
from multispin.system import World, get_preset


def _cases():
    rng = np.random.default_rng(0)
    for i in range(40):
        k = 6
        w = World(
            get_preset("paper-qwen").override(
                {"devices.count": k, "seed": i, "radio.p_ul_dbm": float(rng.uniform(-20, 15))}
            )
        )
        inst = w.instance(0)
        alpha = float(rng.uniform(0.75, 0.95))
        loss = float(rng.uniform(0.0, 0.08))
        inst = inst.replace(alpha=np.full(k, alpha), alpha_coupled=np.full(k, alpha * (1 - loss)))
        gamma = int(rng.integers(1, 10))
        yield inst, w.saa_uniforms(0, 200), alpha, loss, gamma


def test_boundary_decides_like_the_model_for_identical_alphas():
    agree, wrong_formula_agrees, n = 0, 0, 0
    for inst, u, alpha, loss, gamma in _cases():
        g = np.full(inst.num_devices, gamma)
        std = SAAObjective(inst, u).evaluate(g)
        cpl = SAAObjective(inst.with_coupled(np.ones(inst.num_devices, bool)), u).evaluate(g)
        share = std.e_t_comm_s / (std.t_comp_s + std.e_t_comm_s)
        model = cpl.goodput_tokens_per_s > std.goodput_tokens_per_s
        agree += bool(coupled_wins(alpha, loss, gamma, share)) == model
        # negative control: the α-loss itself in place of the token loss misjudges some cases
        wrong_formula_agrees += (share > loss) == model
        n += 1
    assert agree == n
    assert wrong_formula_agrees < n


def test_token_loss_is_zero_without_loss_and_grows_with_it(tmp_path):
    assert token_loss(0.9, 0.0, 8) == 0.0
    losses = token_loss(0.9, np.array([0.01, 0.03, 0.06]), 8)
    assert np.all(np.diff(losses) > 0)
    out = plot_boundary(tmp_path / "b.png", points=[("x", 0.03, 0.2)])
    assert out.exists()
