"""The continual learner: online accuracy taken before each step, one compiled call per task
that matches the steps taken one by one, BatchNorm statistics as state, the paper's layer
names, and every registered intervention through the loop (methods merged later included)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import interventions
from continual.config import CONTINUAL_DEFAULTS, SUPERVISED_SETTINGS
from continual.learner import Examples, LearnerConfig, init, make_learner, predict
from continual.loop import ContinualRun, make_train_task
from continual.tasks import (
    BENCHMARKS,
    DIAGNOSTICS,
    Protocol,
    Source,
    draw_task,
    sample_positions,
)
from experiment import diagnose as diag
from experiment.events import event_apply
from networks.classifiers import BATCH_NORM_EPSILON
from tests.helpers.continual_reference import task_images
from tests.helpers.trees import assert_bit_identical

pytestmark = pytest.mark.slow  # every test here takes seconds: `-m "not slow"` leaves them out


def batch(shape, n=16, classes=10, seed=0) -> Examples:
    rng = np.random.default_rng(seed)
    return Examples(jnp.asarray(rng.random((n, *shape)), jnp.float32),
                    jnp.asarray(rng.integers(0, classes, n), jnp.int32))


def test_online_accuracy_is_that_of_the_network_before_the_step():
    learner = make_learner(LearnerConfig(input_shape=(12,), hidden_dims=(32,),
                                         learning_rate=1e-2))
    state = learner.init(jax.random.key(0))
    data = batch((12,), n=64)
    step = jax.jit(learner.update)
    seen = []
    for _ in range(8):  # trained on the same batch again and again, it fits more of it
        before = float(np.mean(np.argmax(predict(state, data.x), -1) == np.asarray(data.y)))
        state, metrics = step(state, data)
        assert float(metrics["accuracy"]) == before
        seen.append(before)
    assert seen[-1] > seen[0]


def test_a_task_in_one_call_matches_its_steps_one_by_one():
    rng = np.random.default_rng(1)
    src = Source(rng.integers(0, 256, (50, 12), dtype=np.uint8),
                 rng.integers(0, 10, 50).astype(np.int32), 10, 1 / 255)
    protocol = Protocol(BENCHMARKS["permuted_mnist"], 20, 2, 8)  # 2 steps per epoch, 4 in all
    task = draw_task(protocol, src, [3, 4], 2)
    learner = make_learner(LearnerConfig(input_shape=(12,), hidden_dims=(16,)))
    states = jax.vmap(learner.init)(jnp.stack([jax.random.key(3), jax.random.key(4)]))
    call = make_train_task(learner, protocol, src.scale)
    new, metrics = call(jax.tree.map(jnp.copy, states), jnp.asarray(src.images), task.index,
                        task.perm, task.labels, task.order)
    update = jax.jit(learner.update)
    for i in range(2):
        state = jax.tree.map(lambda a, i=i: a[i], states)
        accuracies = []
        for positions in task.order[i]:
            x = task_images(src, task, i, positions)
            state, m = update(state, Examples(jnp.asarray(x), task.labels[i][positions]))
            accuracies.append(float(m["accuracy"]))
        np.testing.assert_allclose(metrics["online_accuracy"][i], np.mean(accuracies), atol=1e-6)
        x = task_images(src, task, i, np.arange(20))
        final = np.mean(np.argmax(np.asarray(predict(state, jnp.asarray(x))), -1)
                        == task.labels[i])
        np.testing.assert_allclose(metrics["final_accuracy"][i], final, atol=1e-6)
        np.testing.assert_allclose(new.net.params["Dense_0"]["kernel"][i],
                                   state.net.params["Dense_0"]["kernel"], atol=1e-5)


CONV = LearnerConfig(network="conv", input_shape=(8, 8, 3), channels=(4, 6), hidden_dims=(16,))


def test_conv_layers_are_named_for_the_unit_topology_and_batch_norm_is_state():
    learner = make_learner(CONV)
    state = learner.init(jax.random.key(0))
    names = set(state.net.params)
    assert names == {"Conv_0", "BatchNorm_0", "Conv_1", "BatchNorm_1", "MLP_0", "Dense_0"}
    assert set(state.net.params["MLP_0"]) == {"Dense_0", "LayerNorm_0"}
    assert state.net.params["MLP_0"]["Dense_0"]["kernel"].shape == (2 * 2 * 6, 16)
    assert learner.reset_parts == ("net", "batch_stats", "plasticity")
    data = batch((8, 8, 3))
    new, _ = jax.jit(learner.update)(state, data)
    assert not np.allclose(new.batch_stats["BatchNorm_0"]["mean"],
                           state.batch_stats["BatchNorm_0"]["mean"])
    # hidden_0, Conv_0's features: the mean over positions of ReLU(BatchNorm(conv))
    p, s = new.net.params, new.batch_stats
    y = jax.lax.conv_general_dilated(data.x, p["Conv_0"]["kernel"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = y + p["Conv_0"]["bias"]
    y = (y - s["BatchNorm_0"]["mean"]) / np.sqrt(s["BatchNorm_0"]["var"] + BATCH_NORM_EPSILON)
    y = np.maximum(y * p["BatchNorm_0"]["scale"] + p["BatchNorm_0"]["bias"], 0)
    feats = jax.jit(learner.features)(new, data)["net"]
    assert set(feats) == {"hidden_0", "hidden_1", "MLP_0/hidden_0"}
    np.testing.assert_allclose(feats["hidden_0"], y.mean(axis=(1, 2)), atol=1e-5)
    assert feats["hidden_1"].shape == (16, 6) and feats["MLP_0/hidden_0"].shape == (16, 16)


def test_without_layer_norm_and_with_each_optimizer():
    plain = init(jax.random.key(0), LearnerConfig(input_shape=(5,), layer_norm=False))
    assert set(plain.net.params["MLP_0"]) == {"Dense_0"}
    data = batch((5,))
    kernels = {}
    for name in ("adam", "sgd", "muon"):
        learner = make_learner(LearnerConfig(input_shape=(5,), hidden_dims=(8,), optimizer=name))
        state = learner.init(jax.random.key(0))
        new, _ = jax.jit(learner.update)(state, data)
        kernels[name] = np.asarray(new.net.params["MLP_0"]["Dense_0"]["kernel"])
        assert not np.allclose(kernels[name], state.net.params["MLP_0"]["Dense_0"]["kernel"])
    assert not np.allclose(kernels["adam"], kernels["muon"])
    assert not np.allclose(kernels["adam"], kernels["sgd"])


def test_shrink_perturb_defaults_to_dashs_supervised_baseline():
    """DASH's S&P (models' weight_sp): each Dense kernel and bias <- 0.3 theta + N(0, 0.01^2),
    LayerNorm and the optimizer state as they were."""
    method = interventions.registered()["shrink_perturb"]
    cfg = method.config(**{f: getattr(CONTINUAL_DEFAULTS, method.flag(f))
                           for f in method.field_names})
    learner = make_learner(LearnerConfig(input_shape=(64,), hidden_dims=(256,)))
    state = learner.init(jax.random.key(0))
    state = state.replace(net=state.net.replace(opt_state=jax.tree.map(
        lambda x: x + 1 if x.dtype == jnp.float32 else x, state.net.opt_state)))
    fresh = learner.init(jax.random.key(2))
    new = method.apply(state, learner.param_parts, cfg,
                       interventions.EventContext(key=jax.random.key(1), fresh=fresh))
    old_p, new_p = state.net.params, new.net.params
    layers = [(old_p["MLP_0"]["Dense_0"], new_p["MLP_0"]["Dense_0"]),
              (old_p["Dense_0"], new_p["Dense_0"])]
    for before, after in layers:
        for leaf in ("kernel", "bias"):
            noise = np.asarray(after[leaf]) - 0.3 * np.asarray(before[leaf])
            assert abs(noise.mean()) < 3 * 0.01 / np.sqrt(noise.size) + 1e-6
            assert noise.std() == pytest.approx(0.01, rel=0.2 if noise.size < 100 else 0.05)
    for leaf in ("scale", "bias"):
        np.testing.assert_array_equal(new_p["MLP_0"]["LayerNorm_0"][leaf],
                                      old_p["MLP_0"]["LayerNorm_0"][leaf])
    for a, b in zip(jax.tree.leaves(new.net.opt_state), jax.tree.leaves(state.net.opt_state),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_supervised_defaults_name_fields_the_methods_have():
    for name, fields in SUPERVISED_SETTINGS.items():
        method = interventions.registered().get(name)
        if method is None:
            continue
        missing = sorted(set(fields) - set(method.field_names))
        assert not missing, f"{name} has no settings {missing}; fix SUPERVISED_SETTINGS"
        for field, value in fields.items():
            assert getattr(CONTINUAL_DEFAULTS, method.flag(field)) == value
    assert CONTINUAL_DEFAULTS.clip_c == 2.0


def synthetic_source(network: str) -> Source:
    rng = np.random.default_rng(0)
    shape = (64,) if network == "mlp" else (8, 8, 3)
    return Source(rng.integers(0, 256, (80, *shape), dtype=np.uint8),
                  rng.integers(0, 10, 80).astype(np.int32), 10, 1 / 255)


def tiny_run(tmp_path, network: str, intervention: str, **settings) -> ContinualRun:
    task = settings.pop("task", "random_label_digits" if network == "mlp"
                        else "random_label_cifar")
    settings = {"channels": (4, 6), **settings} if network == "conv" else settings
    settings = {"diagnostics": False, **settings}
    cfg = dataclasses.replace(CONTINUAL_DEFAULTS, task=task, num_tasks=3, examples=32, epochs=1,
                              batch_size=16, hidden_dim=16, num_seeds=2,
                              intervention=intervention, logdir=str(tmp_path), progress=False,
                              **settings)
    return ContinualRun(cfg, source=synthetic_source(network))


@pytest.mark.parametrize("network", ["mlp", "conv"])
@pytest.mark.parametrize("name", list(interventions.registered()))
def test_every_registered_method_runs_through_the_loop(tmp_path, network, name):
    run = tiny_run(tmp_path, network, name)
    progress = run.run({"intervention": name})
    rows = (tmp_path / "continual" / run.cfg.task / f"{name}-seed0" / "tasks.csv").read_text()
    lines = rows.strip().splitlines()[1:]
    assert len(lines) == 3 * 2
    assert all(np.isfinite(float(v)) for line in lines for v in line.split(",")[2:])
    method = interventions.registered()[name]
    report = (tmp_path / "continual" / run.cfg.task / f"{name}-seed0" / "interventions.csv")
    events = report.read_text().strip().splitlines()[1:]
    if method.kind == "event":
        assert {line.split(",")[0] for line in events} == {"0", "1"}  # after tasks 0 and 1
        assert {line.split(",")[2] for line in events} == {name}
    else:
        assert not events and name in progress.states.plasticity


def test_a_restored_state_is_placed_as_a_fresh_one(tmp_path):
    """Committed to the default device alike: a program lowers an argument's placement with
    it, so otherwise a resumed run's programs would all miss JAX's compilation cache."""
    tiny_run(tmp_path, "mlp", "none").run({"intervention": "none"})
    restored = tiny_run(tmp_path, "mlp", "none").start()
    fresh = tiny_run(tmp_path / "fresh", "mlp", "none").start()
    assert restored.tasks_done == 3 and fresh.tasks_done == 0
    assert [(x.committed, x.sharding) for x in jax.tree.leaves(fresh.states)] == \
        [(x.committed, x.sharding) for x in jax.tree.leaves(restored.states)]


def test_clip_at_a_boundary_puts_every_singular_value_into_half_to_two(tmp_path):
    run = tiny_run(tmp_path, "conv", "clip")
    states = run.init_fn(run.init_keys)
    task = run.task(0)
    states, _ = run.train_task(states, run.images, task.index, task.perm, task.labels,
                               task.order)
    states = jax.tree.map(lambda a: a * 3.0 if a.ndim >= 3 else a, states)  # spread spectra
    clipped, rows = run.event(states, 0)
    assert clipped.net.params["Conv_1"]["kernel"].shape == (2, 3, 3, 4, 6)
    for layer in ("Conv_1", "MLP_0"):
        tree = clipped.net.params[layer]
        kernel = np.asarray(tree["kernel"] if "kernel" in tree else tree["Dense_0"]["kernel"])
        for seed_kernel in kernel:
            s = np.linalg.svd(seed_kernel.reshape(-1, seed_kernel.shape[-1]).astype(np.float64),
                              compute_uv=False)
            assert s.min() >= 0.5 - 1e-4 and s.max() <= 2.0 + 1e-4
    assert rows and {row[2] for row in rows} == {"clip"}


@pytest.mark.parametrize("name", ["clip", "reset"])
def test_an_event_report_from_the_diagnostics_spectra_matches_one_from_svds(tmp_path, name):
    """At a boundary with diagnostics the report reads their sigma_max and sigma_min (and a clip
    maps them): the rows equal those of a report that takes an SVD before and after."""
    run = tiny_run(tmp_path, "mlp", name, diagnostics=True)
    states = run.init_fn(run.init_keys)
    task = run.task(0)
    states, _ = run.train_task(states, run.images, task.index, task.perm, task.labels,
                               task.order)
    states = jax.tree.map(lambda a: a * 3.0 if a.ndim >= 3 else a, states)  # spread spectra
    spectra = jax.device_get(run.diagnose(states, run.examples(0, DIAGNOSTICS, 16)))
    new_fast, fast = run.event(jax.tree.map(jnp.copy, states), 0, spectra)
    new_full, full = run.event(jax.tree.map(jnp.copy, states), 0)
    assert_bit_identical(new_fast, new_full)
    assert [row[:-1] for row in fast] == [row[:-1] for row in full]
    np.testing.assert_allclose([float(r[-1]) for r in fast], [float(r[-1]) for r in full],
                               rtol=1e-3)
    cond = {(row[1], row[4]): row[-1] for row in fast if row[5] == "cond_before"}
    diagnosed = {(row[1], row[3]): row[-1] for row in diag.rows(0, run.cfg.seeds, spectra)
                 if row[4] == "cond"}
    assert cond == {k: v for k, v in diagnosed.items() if k in cond} and cond


def test_shrink_perturb_with_gaussian_noise_builds_no_fresh_init(tmp_path):
    """DASH's supervised S&P draws Gaussian noise: its event never calls the init."""
    run = tiny_run(tmp_path, "mlp", "shrink_perturb")
    assert run.cfg.sp_noise == "gaussian"
    calls = []

    def init_fn(keys):
        calls.append(keys)
        return run.init_fn(keys)

    event = event_apply(run.learner, run.plan, run.cfg.seeds, init_fn, run.init_keys)
    states = run.init_fn(run.init_keys)
    new, rows = event(states, 0)
    assert not calls and rows
    assert not np.allclose(new.net.params["Dense_0"]["kernel"],
                           0.3 * states.net.params["Dense_0"]["kernel"])  # the noise is there
    fresh = dataclasses.replace(run.cfg, sp_noise="fresh")
    method = interventions.registered()["shrink_perturb"]
    assert set(method.needs_of(method.make_config(fresh.method_settings))) == {"key", "fresh"}


@pytest.mark.parametrize("network", ["mlp", "conv"])
def test_examples_gathered_on_the_device_are_the_host_task_images(tmp_path, network):
    """What diagnostics and data-reading events get (gathered on the device) is, bit for bit,
    `task_images` of the positions each seed's stream draws."""
    for task_name in (["permuted_digits", "random_label_digits"] if network == "mlp"
                      else ["random_label_cifar"]):
        run = tiny_run(tmp_path / task_name, network, "none", task=task_name)
        batch = run.examples(1, DIAGNOSTICS, 40)  # more than the task's 32 examples
        task = run.task(1)
        for i, seed in enumerate(run.cfg.seeds):
            positions = sample_positions(seed, 1, DIAGNOSTICS, 40, run.protocol.task_examples)
            np.testing.assert_array_equal(batch.x[i], task_images(run.source, task, i, positions))
            np.testing.assert_array_equal(batch.y[i], task.labels[i][positions])
