"""The intervention registry: combinations, settings as flags and config fields, per-step
hooks in the agents' updates, and a plugin registered from outside run end to end."""

import dataclasses
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from agents import make_agent
from agents.sac import SACConfig
from analysis.grouping import result_settings
from experiment.config import TrainConfig
from experiment.rundir.record import added_settings, with_added_settings
from interventions import Method, Settings, make_plan, registered, registry, setting
from interventions.registry import parts_setting
from learners.batch import Batch
from tests.helpers import forkserver
from tests.helpers.runs import FAST_SAC, REPO, read_csv
from tests.helpers.toy_intervention import CLAMP, SCALE_BIAS, register_toys


@pytest.fixture
def toys(monkeypatch):
    """The toy methods registered for one test, and the registry as it was after it (the
    run scripts' TrainConfig has fields for the methods registered when it was built)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register_toys()


def test_every_setting_of_every_method_is_a_train_config_field_at_its_default():
    cfg = TrainConfig()
    for flag, (method, field, _) in registry.all_settings().items():
        assert getattr(cfg, flag) == field.default, flag
        assert flag.startswith(method.prefix + "_")
    assert set(registry.names()) >= {"none", "reset", "clip"}


@pytest.mark.parametrize("spec, names", [
    ("none", ()), ("clip", ("clip",)), (" reset ", ("reset",)),
])
def test_parse_reads_single_methods(spec, names):
    assert tuple(m.name for m in registry.parse(spec)) == names


@pytest.mark.parametrize("spec, message", [
    ("", "no intervention given"),
    ("clp", "unknown intervention 'clp'"),
    ("none,clip", "'none' cannot be combined"),
    ("clip+clip", "'clip' is given twice"),
    ("reset,clip", "reset and clip are both events"),
])
def test_combinations_that_cannot_work_are_refused_with_one_line(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        registry.parse(spec)
    assert "\n" not in str(error.value)


def test_a_per_step_method_combines_with_an_event_in_either_spelling(toys):
    for spec in ("toy_clamp,clip", "toy_clamp+clip"):
        assert registry.canonical(spec) == "toy_clamp+clip"
        assert registry.event_of(spec).name == "clip"


def test_a_method_config_must_say_its_parts():
    @dataclasses.dataclass(frozen=True)
    class NoParts(Settings):
        x: float = setting(1.0, "x")

    with pytest.raises(ValueError, match="parts"):
        Method(name="bad", kind="event", config=NoParts, summary="", apply=lambda *a: a[0])


def test_needs_narrowed_by_settings_stay_within_the_declared_needs():
    sp = registered()["shrink_perturb"]
    gaussian = sp.make_config({"sp_noise": "gaussian"})
    assert sp.needs_of(gaussian) == ("key",)
    assert sp.needs_of(sp.make_config({})) == ("key", "fresh")
    assert registered()["reset"].needs_of(None) == registered()["reset"].needs
    wider = dataclasses.replace(sp, needs_for=lambda cfg: ("key", "data"))
    with pytest.raises(ValueError, match="beyond its needs"):
        wider.needs_of(gaussian)


def test_a_registered_name_or_flag_cannot_be_taken_twice():
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registered()["clip"])

    @dataclasses.dataclass(frozen=True)
    class Clash(Settings):
        c: float = setting(1.0, "clashes with clip's --clip_c")
        parts: tuple[str, ...] = parts_setting("x")

    with pytest.raises(ValueError, match="clip_c"):
        registry.register(Method(name="clip2", prefix="clip", kind="event", config=Clash,
                                 summary="", apply=lambda *a: a[0]))


def test_a_setting_error_names_its_flag():
    with pytest.raises(registry.SettingError, match=r"^clip_c must be a finite number >= 1"):
        registered()["clip"].make_config({"clip_c": 0.5})
    with pytest.raises(registry.SettingError, match=r"^clip_method='qr' is not accepted; use "
                                                    r"one of: svd, newton_schulz"):
        registered()["clip"].make_config({"clip_method": "qr"})


def test_a_record_without_a_methods_settings_resumes_with_their_defaults():
    record = {"intervention": "clip", "clip_c": 2.0}
    filled = with_added_settings(record)
    for flag in added_settings():
        if "." not in flag:
            assert flag in filled, flag
    assert filled["clip_c"] == 2.0 and filled["intervention_unit"] == "env_steps"


def test_aggregation_ignores_the_settings_of_methods_a_run_does_not_use():
    clip = result_settings({"intervention": "clip", "clip_c": 2.0, "reset_parts": []})
    assert "clip_c" in clip and "reset_parts" not in clip
    none = result_settings({"intervention": "none", "clip_c": 2.0, "intervention_every": 5})
    assert "clip_c" not in none and "intervention_every" not in none


def _batches(seed=0, utd=3, batch=8, obs=4, act=2):
    rng = np.random.default_rng(seed)
    shapes = [(utd, batch, obs), (utd, batch, act), (utd, batch), (utd, batch, obs), (utd, batch)]
    return Batch(*(np.asarray(rng.normal(size=s), np.float32) for s in shapes))


@pytest.mark.slow
def test_a_projection_runs_after_every_gradient_step_inside_the_update(toys):
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(16, 16)))
    plan = make_plan("toy_clamp", {"toy_clamp_bound": 0.01}, agent)
    hooked = make_agent("sac", agent.config, plan.hooks)
    state = hooked.init(jax.random.key(0), 4, 2)
    assert set(state.plasticity) == {"toy_clamp"}
    state, _ = jax.jit(hooked.update)(state, _batches())
    for path in ("actor", "critic"):
        for key, kernel in jax.tree_util.tree_leaves_with_path(getattr(state, path).params):
            if key[-1].key == "kernel":
                assert float(np.abs(kernel).max()) <= 0.01, key
    plain = make_agent("sac", agent.config)
    unhooked, _ = jax.jit(plain.update)(plain.init(jax.random.key(0), 4, 2), _batches())
    assert float(np.abs(unhooked.actor.params["MLP_0"]["Dense_0"]["kernel"]).max()) > 0.01


@pytest.mark.slow
def test_a_plugin_registered_from_outside_runs_end_to_end(tmp_path):
    """A user's plugin: two methods registered before the run script starts are flags,
    config.json keys, interventions.csv rows and per-step hooks like the built-in ones."""
    args = [*FAST_SAC, f"--logdir={tmp_path}", "--max_steps=600", "--start_steps=200",
            "--eval_every=300", "--intervention=toy_scale_bias,toy_clamp",
            "--intervention_every=400", "--toy_scale_bias_factor=0.25", "--toy_clamp_bound=0.2"]
    proc = forkserver.run([sys.executable, "tests/helpers/toy_intervention.py", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "sac" / "cartpole-swingup" / "toy_scale_bias+toy_clamp-utd1-seed0"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["intervention"] == "toy_scale_bias+toy_clamp"
    assert config["toy_scale_bias_factor"] == 0.25 and config["toy_clamp_bound"] == 0.2
    rows = read_csv(run_dir / "interventions.csv")
    assert {r["kind"] for r in rows} == {"toy_scale_bias"}
    assert {r["env_step"] for r in rows} == {"400"}
    help_text = forkserver.run([sys.executable, "tests/helpers/toy_intervention.py", "--help"],
                               cwd=REPO, capture_output=True, text=True, timeout=120).stdout
    assert "--toy_clamp_bound" in help_text and "toy_scale_bias" in help_text


def test_the_toy_methods_are_what_the_plugin_test_registers():
    assert SCALE_BIAS.kind == "event" and CLAMP.kind == "projection"


def _with_repo_on_path() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": REPO}


@pytest.mark.slow
def test_methods_from_registers_an_outside_module_for_a_continual_run(tmp_path):
    """`--methods_from=module`: a user's method module outside the package, loaded before the
    flags are defined, is an --intervention with flags of its own, as the built-in ones."""
    args = ["launch/run_continual.py", "--methods_from=tests.helpers.toy_intervention",
            "--intervention=toy_scale_bias", "--toy_scale_bias_factor=0.5",
            "--task=random_label_digits", "--num_tasks=2", "--num_seeds=1", "--hidden_dim=8",
            "--epochs=1", "--diagnostics=false", "--progress=false", f"--logdir={tmp_path}"]
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=_with_repo_on_path())
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "continual" / "random_label_digits" / "toy_scale_bias-seed0"
    assert json.loads((run_dir / "config.json").read_text())["toy_scale_bias_factor"] == 0.5
    assert {r["kind"] for r in read_csv(run_dir / "interventions.csv")} == {"toy_scale_bias"}
    help_text = subprocess.run([sys.executable, "launch/run_sac.py", "--methods_from",
                                "tests.helpers.toy_intervention", "--help"], cwd=REPO,
                               capture_output=True, text=True, timeout=120,
                               env=_with_repo_on_path()).stdout
    assert "--toy_clamp_bound" in help_text and "--methods_from" in help_text


@pytest.mark.slow
@pytest.mark.parametrize("module, words", [
    ("nosuch_module_xyz", ["cannot import nosuch_module_xyz", "ModuleNotFoundError"]),
    ("json", ["json defines no METHOD"]),
])
def test_methods_from_a_module_it_cannot_load_is_one_line(module, words):
    proc = forkserver.run([sys.executable, "launch/run_sac.py", f"--methods_from={module}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: --methods_from={module}: ")
    for word in words:
        assert word in lines[0]


def test_load_module_registers_its_methods_once(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after
    before = set(registered())
    methods = registry.load_module("tests.helpers.toy_intervention")
    assert {m.name for m in methods} == {"toy_scale_bias", "toy_clamp"}
    assert registry.load_module("tests.helpers.toy_intervention") == methods  # no clash
    assert {"toy_scale_bias", "toy_clamp"} <= set(registered())
    assert before <= set(registered())


def test_a_setting_names_its_runs_by_its_methods_label():
    """A sweep's run names spell a varied setting as its method labels it (clip's c: c2), else
    as its flag; the label is the method's declaration, not the sweep's."""
    assert registry.run_label("clip_c") == "c"
    assert registry.run_label("clip_sides") is None
    assert registry.run_label("learning_rate") is None  # no method's
    with pytest.raises(registry.SettingError, match="clip_c must be a finite number >= 1"):
        registry.check_value("clip_c", 0.5)
    registry.check_value("learning_rate", -1.0)  # not a method's: the run script checks it
