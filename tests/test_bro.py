"""BRO: losses against direct computations, the optimistic actor and its scalars, resets,
parameter counts from the architecture, and run_bro.py end to end with each intervention."""

import dataclasses
import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import bro, bro_state, make_agent
from interventions import replace_parts
from networks import tanh_gaussian_log_prob
from tests.helpers import batches
from tests.helpers.fixtures import shared_fixture
from tests.helpers.runs import REPO, read_csv, run
from tests.helpers.trees import numeric_leaves

OBS, ACT = 5, 3
SMALL = dataclasses.replace(
    bro_state.BROConfig(), critic_width=32, actor_width=16, optimistic_width=16, num_quantiles=10
)


def random_batch(key, utd=1, batch=16):
    return batches.random_batch(key, utd, batch, OBS, ACT)


@shared_fixture
def init():
    return jax.jit(lambda key: bro.init(key, OBS, ACT, SMALL))


@shared_fixture
def update():
    return jax.jit(functools.partial(bro.update, config=SMALL))


def value(scalar):
    return float(scalar.apply_fn({"params": scalar.params}))


# Losses


def np_quantile_huber(pred, target, taus, kappa):
    """SPEC.md's quantile Huber loss with explicit loops, float64."""
    (batch, n), m = pred.shape, target.shape[1]
    taus = np.asarray(taus, np.float64)
    total = 0.0
    for b in range(batch):
        for j in range(m):
            for i in range(n):
                u = float(target[b, j]) - float(pred[b, i])
                huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                total += abs(taus[i] - (u < 0)) * huber / kappa
    return total / (batch * m)


@pytest.mark.parametrize("kappa", [1.0, 0.3])
def test_quantile_huber_loss_matches_numpy(kappa):
    rng = np.random.default_rng(0)
    pred = rng.normal(0, 2, (4, 5)).astype(np.float32)
    target = rng.normal(0, 2, (4, 7)).astype(np.float32)
    taus = np.asarray(bro.quantile_midpoints(5))
    got = bro.quantile_huber_loss(jnp.asarray(pred), jnp.asarray(target), jnp.asarray(taus), kappa)
    assert float(got) == pytest.approx(np_quantile_huber(pred, target, taus, kappa), rel=1e-5)


def test_quantile_huber_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    pred = rng.normal(0, 2, (2, 4)).astype(np.float32)
    target = rng.normal(0, 2, (2, 5)).astype(np.float32)
    taus = np.asarray(bro.quantile_midpoints(4))
    grad = jax.grad(bro.quantile_huber_loss)(jnp.asarray(pred), jnp.asarray(target),
                                             jnp.asarray(taus), 0.7)
    numeric = np.zeros(pred.shape)
    for idx in np.ndindex(pred.shape):
        step = np.zeros(pred.shape)
        step[idx] = 1e-4
        up = np_quantile_huber(pred + step, target, taus, 0.7)
        down = np_quantile_huber(pred - step, target, taus, 0.7)
        numeric[idx] = (up - down) / 2e-4
    np.testing.assert_allclose(grad, numeric, atol=1e-4)


def test_quantile_midpoints():
    np.testing.assert_allclose(bro.quantile_midpoints(100), (2 * np.arange(100) + 1) / 200)


def test_quantile_loss_minimiser_is_the_quantile():
    """Gradient descent on the predictions must find the tau-quantiles of the targets."""
    target = jax.random.normal(jax.random.key(0), (1, 400))
    taus = bro.quantile_midpoints(5)
    grad = jax.grad(lambda p: bro.quantile_huber_loss(p, target, taus, 0.01))

    def step(p, _):
        return p - 0.05 * grad(p), None

    pred, _ = jax.jit(lambda p: jax.lax.scan(step, p, None, length=2000))(jnp.zeros((1, 5)))
    expected = np.quantile(np.asarray(target[0]), np.asarray(taus))
    np.testing.assert_allclose(pred[0], expected, atol=0.05)


@pytest.mark.slow
def test_gaussian_kl_matches_monte_carlo_of_tanh_policies():
    k = jax.random.split(jax.random.key(0), 5)
    mean_p, mean_q = jax.random.normal(k[0], (3,)), jax.random.normal(k[1], (3,))
    log_std_p = 0.3 * jax.random.normal(k[2], (3,))
    log_std_q = 0.3 * jax.random.normal(k[3], (3,))
    u = mean_p + jnp.exp(log_std_p) * jax.random.normal(k[4], (200_000, 3))
    log_ratio = tanh_gaussian_log_prob(u, mean_p, log_std_p) - tanh_gaussian_log_prob(
        u, mean_q, log_std_q
    )
    mc, se = float(log_ratio.mean()), float(log_ratio.std()) / np.sqrt(u.shape[0])
    kl = float(bro.gaussian_kl(mean_p, log_std_p, mean_q, log_std_q))
    assert abs(kl - mc) < 4 * se + 1e-4
    assert float(bro.gaussian_kl(mean_p, log_std_p, mean_p, log_std_p)) == pytest.approx(0.0)


# The optimistic actor and its scalars


@pytest.mark.slow
def test_kl_metric_is_the_mean_shift(init):
    """BRO's KL per action dim: sum_d (mean_o - mean_c)^2 / (2 std_c^2) / |A|, batch mean
    (the std multiplier undone, as in the BRO reference)."""
    state = init(jax.random.key(0))
    batch = jax.tree.map(lambda x: x[0], random_batch(jax.random.key(1)))
    step = jax.jit(functools.partial(bro.update_optimistic_actor, config=SMALL))
    _, metrics = step(state, batch, jax.random.key(2))
    mean_c, log_std_c = state.actor.apply_fn({"params": state.actor.params}, batch.observations)
    mean_o, _ = state.optimistic_actor.apply_fn(
        {"params": state.optimistic_actor.params}, batch.observations, mean_c, log_std_c
    )
    shift, std_c = np.asarray(mean_o - mean_c, np.float64), np.exp(np.asarray(log_std_c, float))
    expected = np.mean(np.sum(shift**2 / (2 * std_c**2), axis=-1)) / ACT
    assert float(metrics["kl"]) == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow
def test_scalars_move_in_bro_directions(init, update):
    """KL per dim above target: beta_opt down, lambda_KL up; below: the reverse. Entropy above
    target: temperature down; below: up."""
    state = init(jax.random.key(0))
    assert value(state.optimism) == pytest.approx(1.0, rel=1e-5)
    assert value(state.kl_weight) == pytest.approx(0.25, rel=1e-5)
    assert value(state.temp) == pytest.approx(1.0, rel=1e-6)
    step = jax.jit(functools.partial(bro.update_scalars, config=SMALL))
    target = SMALL.target_kl
    for kl, sign in ((target + 0.04, -1), (target - 0.04, 1)):
        entropy = state.target_entropy - sign * 1.0
        new, m = step(state, entropy, jnp.float32(kl))
        assert sign * (value(new.optimism) - 1.0) > 0
        assert -sign * (value(new.kl_weight) - 0.25) > 0
        assert sign * (value(new.temp) - 1.0) > 0
        assert float(m["optimism"]) == pytest.approx(value(new.optimism), rel=1e-6)
    # In a full update the fresh optimistic actor's KL (tiny std_c) is far above target.
    new, m = update(state, random_batch(jax.random.key(1)))
    assert float(m["kl"]) > target
    assert value(new.optimism) < 1.0 and value(new.kl_weight) > 0.25


@pytest.mark.slow
def test_act_collects_with_the_optimistic_policy(init):
    state = init(jax.random.key(0))
    # A moderate std (raw log-std 0.6: std_c 0.46) and a visible shift, so both are measurable.
    actor_params = jax.tree.map(lambda x: x, state.actor.params)
    actor_params["log_std"] = {"kernel": jnp.zeros((16, ACT)), "bias": jnp.full((ACT,), 0.6)}
    opt_params = jax.tree.map(lambda x: x, state.optimistic_actor.params)
    opt_params["shift"] = {"kernel": 60.0 * opt_params["shift"]["kernel"]}
    state = state.replace(
        actor=state.actor.replace(params=actor_params),
        optimistic_actor=state.optimistic_actor.replace(params=opt_params),
    )
    obs = jnp.tile(jax.random.normal(jax.random.key(1), (1, OBS)), (40_000, 1))
    mean_c, log_std_c = state.actor.apply_fn({"params": actor_params}, obs[:1])
    mean_o, log_std_o = state.optimistic_actor.apply_fn(
        {"params": opt_params}, obs[:1], mean_c, log_std_c
    )
    act = jax.jit(bro.act, static_argnums=3)
    # Jitted and eager tanh may differ by an ulp (a GPU fuses them differently).
    np.testing.assert_allclose(act(state, obs[:1], None, True), jnp.tanh(mean_c), rtol=1e-6)

    actions = np.asarray(act(state, obs, jax.random.key(2), False))
    rng = np.random.default_rng(0)
    std_o = 0.75 * np.exp(np.asarray(log_std_c[0], np.float64))
    reference = np.tanh(np.asarray(mean_o[0]) + std_o * rng.standard_normal((400_000, ACT)))
    np.testing.assert_allclose(actions.mean(0), reference.mean(0), atol=0.01)
    np.testing.assert_allclose(actions.std(0), reference.std(0), rtol=0.03)
    assert np.all(np.abs(mean_o - mean_c) > 0.05)  # the shift is visible at this scale


# Update mechanics


def test_update_compiles_once_and_counts_steps(init, update):
    """The state an update returns has the types of a fresh one: no second compilation."""
    state, _ = update(init(jax.random.key(0)), random_batch(jax.random.key(0)))
    compiled = update._cache_size()
    for i in range(1, 4):
        state, metrics = update(state, random_batch(jax.random.key(i)))
    assert update._cache_size() == compiled
    assert int(state.step) == 4 and int(state.critic.step) == 4
    assert set(metrics) == {"critic_loss", "q", "actor_loss", "entropy", "optimistic_actor_loss",
                            "kl", "temperature", "optimism", "kl_weight"}
    assert all(m.shape == () and np.isfinite(float(m)) for m in metrics.values())


def test_target_is_polyak_average_of_online(init, update):
    state = init(jax.random.key(0))
    new, _ = update(state, random_batch(jax.random.key(1)))
    expected = jax.tree.map(lambda o, t: SMALL.tau * o + (1 - SMALL.tau) * t,
                            new.critic.params, state.target_critic_params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 new.target_critic_params, expected)


def test_reset_restores_every_part_bit_identically(init, update):
    """The trainer's BRO reset (re-init from the run's keys, agent.reset_parts) leaves nothing
    trained behind: every leaf but the rng and the step counter equals the initial one."""
    agent = make_agent("bro", SMALL)
    key = jax.random.key(3)
    initial = init(key)
    trained = initial
    for i in range(2):
        trained, _ = update(trained, random_batch(jax.random.key(10 + i)))
    reset = replace_parts(trained, init(key), agent.reset_parts)
    kept = {"rng", "step", "target_entropy"}
    for field in dataclasses.fields(bro_state.BROState):
        name = field.name
        before, after = getattr(initial, name), getattr(reset, name)
        same = jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)),
                                            before, after))
        if name in kept:
            assert name not in agent.reset_parts
            continue
        assert name in agent.reset_parts and all(same), name
        if not jax.tree.leaves(before):  # plasticity, empty without per-step interventions
            continue
        moved = jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)),
                                             before, getattr(trained, name)))
        assert not all(moved), f"{name} did not train, so the reset test cannot see it"
    assert int(reset.step) == 2


@pytest.mark.slow
def test_update_scans_the_utd_minibatches_in_order(init, update):
    """One update on (2, batch) minibatches equals two updates on one minibatch each."""
    state = init(jax.random.key(0))
    batches = random_batch(jax.random.key(1), utd=2)
    scanned, metrics = jax.jit(functools.partial(bro.update, config=SMALL))(state, batches)
    stepped = state
    losses = []
    for i in range(2):
        stepped, m = update(stepped, jax.tree.map(lambda x, i=i: x[i : i + 1], batches))
        losses.append(float(m["critic_loss"]))
    assert int(scanned.step) == 2
    for a, b in zip(numeric_leaves(scanned), numeric_leaves(stepped), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert float(metrics["critic_loss"]) == pytest.approx(np.mean(losses), rel=1e-4)


# Defaults and parameter counts


def bronet_count(inputs, width, depth):
    stem = inputs * width + width + 2 * width
    block = 2 * (width * width + width) + 2 * (2 * width)
    return stem + depth * block


@pytest.mark.parametrize("obs_dim, act_dim", [(67, 21), (223, 38)], ids=["humanoid", "dog"])
def test_param_counts_match_the_architecture(obs_dim, act_dim):
    counts = bro.param_counts(obs_dim, act_dim, bro_state.BROConfig())
    critic = 2 * (bronet_count(obs_dim + act_dim, 512, 2) + 512 * 100 + 100)
    actor = bronet_count(obs_dim, 256, 1) + 2 * (256 * act_dim + act_dim)
    optimistic = bronet_count(obs_dim + act_dim, 256, 1) + 256 * act_dim
    assert counts == {"actor": actor, "optimistic_actor": optimistic, "critic": critic}


def test_default_config_matches_spec():
    config = bro_state.BROConfig()
    state = jax.eval_shape(lambda k: bro.init(k, 67, 21, config), jax.random.key(0))
    critic = state.critic.params["net"]
    assert critic["BroNet_0"]["Dense_0"]["kernel"].shape == (2, 88, 512)
    assert {k for k in critic["BroNet_0"] if k.startswith("block")} == {"block_0", "block_1"}
    assert critic["quantiles"]["kernel"].shape == (2, 512, 100)
    assert state.actor.params["BroNet_0"]["block_0"]["Dense_1"]["kernel"].shape == (256, 256)
    assert "block_1" not in state.actor.params["BroNet_0"]
    assert state.optimistic_actor.params["shift"]["kernel"].shape == (256, 21)
    assert (config.batch_size, config.discount, config.tau) == (128, 0.99, 0.005)
    assert (config.target_kl, config.std_multiplier, config.pessimism) == (0.05, 0.75, 0.0)
    assert (config.scalar_lr, config.scalar_b1, config.weight_decay) == (3e-5, 0.5, 1e-4)


def test_config_rejects_what_cannot_work():
    with pytest.raises(ValueError, match="critic_depth must be >= 0"):
        bro_state.BROConfig(critic_depth=-1)
    for bad, message in [(dict(kappa=0.0), "kappa must be positive"),
                         (dict(init_temperature=-1.0), "init_temperature must be positive"),
                         (dict(std_multiplier=0.0), "std_multiplier must be positive"),
                         (dict(critic_lr=-1.0), "critic_lr must be positive"),
                         (dict(tau=2.0), r"tau must be in \(0, 1\]"),
                         (dict(discount=-1.0), r"discount must be in \[0, 1\]"),
                         (dict(temp_b1=1.0), r"temp_b1 must be in \[0, 1\)"),
                         (dict(weight_decay=-1e-4), "weight_decay must be >= 0"),
                         (dict(target_kl=0.0), "target_kl must be positive"),
                         (dict(pessimism=-1.0), "pessimism must be >= 0"),
                         (dict(shift_init_scale=-0.01), "shift_init_scale must be >= 0"),
                         (dict(kappa=1e-40), "kappa must be at least 1.18e-38"),
                         (dict(weight_decay=1e4), "weight_decay x actor_lr must be below 1"),
                         (dict(weight_decay=1.0, critic_lr=1.0),
                          "weight_decay x critic_lr must be below 1"),
                         (dict(init_temperature=1e-300),
                          r"init_temperature must lie strictly inside \(e\^-80, e\^80\)"),
                         (dict(init_temperature=1e36), "init_temperature must lie strictly"),
                         (dict(target_entropy_scale=-0.7), "target_entropy_scale must be above"),
                         (dict(log_std_max=81.0), "-80 <= min < max <= 80"),
                         (dict(log_std_min=-81.0), "-80 <= min < max <= 80"),
                         (dict(log_std_min=5.0), "-80 <= min < max <= 80")]:
        with pytest.raises(ValueError, match=message):
            bro_state.BROConfig(**bad)
    with pytest.raises(ValueError, match="init_kl_weight must lie strictly inside"):
        bro_state.BROConfig(init_kl_weight=0.0)
    # the edges that still work
    bro_state.BROConfig(pessimism=0.0, shift_init_scale=0.0, kappa=1e-30, weight_decay=3000.0,
                        init_temperature=1e-30, target_entropy_scale=-0.69, log_std_min=-80.0,
                        log_std_max=80.0)


# run_bro.py end to end

TINY = ["--env=cartpole-balance", "--critic_width=16", "--critic_depth=1", "--actor_width=8",
        "--actor_depth=0", "--optimistic_width=8", "--optimistic_depth=0", "--num_quantiles=5",
        "--eval_episodes=1", "--progress=false", "--num_seeds=2",
        "--utd=2", "--batch_size=16", "--max_steps=60", "--start_steps=20", "--eval_every=30",
        "--log_every=20", "--checkpoint_every=1000"]
STEPS = (30, 50)


@shared_fixture
def runs(tmp_path_factory):
    """One tiny run per --intervention, in this process: later runs reuse the first one's
    compiled programs from the tests' persistent cache (tests/conftest.py)."""
    logdir = tmp_path_factory.mktemp("bro")
    out = {}
    for intervention in ("reset", "clip", "none"):
        schedule = ([f"--intervention_steps={STEPS[0]},{STEPS[1]}"] if intervention != "none"
                    else ["--dormant_taus=0,0.5", "--srank_threshold=0.5"])
        proc = run("run_bro.py", *TINY, *schedule, f"--intervention={intervention}",
                   f"--logdir={logdir}")
        run_dir = logdir / "bro" / "cartpole-balance" / f"{intervention}-utd2-seed0"
        out[intervention] = (run_dir, proc.stderr)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("intervention", ["reset", "clip", "none"])
def test_run_bro_writes_the_run(runs, intervention):
    run_dir, stderr = runs[intervention]
    actor, optimistic = bronet_count(5, 8, 0) + 2 * (8 + 1), bronet_count(6, 8, 0) + 8
    critic = 2 * (bronet_count(6, 16, 1) + 16 * 5 + 5)  # cartpole: obs 5, act 1
    assert (f"parameters (obs 5, act 1): actor {actor}, optimistic_actor {optimistic}, "
            f"critic {critic:,}") in stderr
    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent"] == "bro" and config["intervention"] == intervention
    assert config["agent_config"]["critic_width"] == 16
    assert json.loads((run_dir / "done.json").read_text())["env_step"] == 60
    evals = read_csv(run_dir / "eval.csv")
    assert [(int(r["env_step"]), int(r["seed"])) for r in evals] == [
        (s, seed) for s in (30, 60) for seed in (0, 1)]
    assert all(os.path.exists(run_dir / f"{seed}.txt") for seed in (0, 1))
    metrics = {r["metric"] for r in read_csv(run_dir / "train.csv")}
    assert {"critic_loss", "kl", "optimism", "kl_weight", "temperature"} <= metrics
    diagnostics = read_csv(run_dir / "diagnostics.csv")
    assert {r["network"] for r in diagnostics} == {
        "actor", "optimistic_actor", "critic", "target_critic"}
    assert "net/BroNet_0/block_0/relu/features[1]" in {r["layer"] for r in diagnostics}
    # The residual stream has an srank and no dormant ratios; the ReLU outputs have both.
    def metrics_of(layer):
        return {r["metric"] for r in diagnostics if r["layer"] == layer}
    assert metrics_of("net/BroNet_0/block_0/residual/features[0]") == {"srank"}
    assert {"srank", "dormant_tau0"} <= metrics_of("net/BroNet_0/block_0/relu/features[0]")
    taus = (0, 0.5) if intervention == "none" else (0, 0.025)  # none: --dormant_taus=0,0.5
    assert {r["metric"] for r in diagnostics if r["metric"].startswith("dormant")} == {
        f"dormant_tau{tau:g}" for tau in taus}
    assert config["srank_threshold"] == (0.5 if intervention == "none" else 0.99)


@pytest.mark.slow
@pytest.mark.parametrize("intervention", ["reset", "clip"])
def test_run_bro_intervenes_at_the_scheduled_steps(runs, intervention):
    run_dir, _ = runs[intervention]
    rows = read_csv(run_dir / "interventions.csv")
    events = sorted({(int(r["env_step"]), int(r["seed"]), r["kind"]) for r in rows})
    assert events == [(s, seed, intervention) for s in STEPS for seed in (0, 1)]
    after = [float(r["value"]) for r in rows if r["metric"] == "cond_after"]
    if intervention == "clip":  # c = 4: every singular value in [1/4, 4]
        assert max(after) <= 16 * (1 + 1e-4)
    assert {r["network"] for r in rows} >= {"optimistic_actor", "target_critic"}


@pytest.mark.slow
def test_run_bro_none_never_intervenes(runs):
    run_dir, _ = runs["none"]
    path = run_dir / "interventions.csv"
    assert not path.exists() or read_csv(path) == []


ADJUST = """
from absl import flags
import launch.run_bro
from experiment.cli import config_from_flags
for argv in {cases!r}:
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["run_bro.py", *argv])
    print(list(config_from_flags("bro").intervention_steps))
"""


@pytest.mark.slow
def test_default_schedule_is_bros_reset_list():
    cases = [["--max_steps=300000"], ["--max_steps=300000", "--utd=2"],
             ["--max_steps=300000", "--intervention=clip"],
             ["--max_steps=300000", "--intervention=none"],
             ["--max_steps=300000", "--intervention_every=1000"],
             ["--max_steps=300000", "--intervention_steps=7,9"]]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", ADJUST.format(cases=cases)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.split("\n")[:-1] == [
        "[15001, 50001, 250001]", "[15001]", "[15001, 50001, 250001]", "[]", "[]", "[7, 9]"]


@pytest.mark.slow
def test_init_scale_sets_every_kernel_but_the_log_std_and_shift_heads():
    state = bro.init(jax.random.key(0), OBS, ACT, dataclasses.replace(SMALL, init_scale=0.5))
    params = {"actor": state.actor.params, "optimistic_actor": state.optimistic_actor.params,
              "critic": state.critic.params}
    scales = {}
    for path, kernel in jax.tree_util.tree_leaves_with_path(params):
        name = jax.tree_util.keystr(path)
        if "kernel" in name:
            s = np.linalg.svd(np.asarray(kernel), compute_uv=False)
            np.testing.assert_allclose(s, s.flat[0], rtol=1e-5, err_msg=name)
            scales[name] = round(float(s.flat[0]), 5)
    special = {k: v for k, v in scales.items() if "log_std" in k or "shift" in k}
    assert sorted(special.values()) == [0.01, 1.0], special  # the reference's, not init_scale
    assert len(scales) > len(special) and {scales[k] for k in scales if k not in special} == {0.5}


def test_bro_reset_steps():
    assert bro_state.reset_steps(1_000_000, utd=10) == (15001, 50001, 250001, 500001, 750001)
    assert bro_state.reset_steps(3_000_000, utd=10) == bro_state.RESET_STEPS
    assert bro_state.reset_steps(1_600_000, utd=10)[-2:] == (1000001, 1500001)
    assert bro_state.reset_steps(1_000_000, utd=2) == (15001,)
    assert bro_state.reset_steps(15001, utd=10) == ()
    assert bro_state.reset_steps(15002, utd=1) == (15001,)
    assert bro_state.RESET_STEPS == (15001, 50001, 250001, 500001, 750001, 1000001, 1500001,
                                     2000001)


@pytest.mark.parametrize("max_steps, utd", [(0, 10), (1000, 0), (1000, 2.0), (True, 10)])
def test_bro_reset_steps_validates(max_steps, utd):
    with pytest.raises(ValueError, match="positive int"):
        bro_state.reset_steps(max_steps, utd)
