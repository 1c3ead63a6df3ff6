"""run_sac.py end to end, as a user types it: files, intervention events, diagnostics."""

import dataclasses
import functools
import json
import os
import shutil
import stat
import time
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import agents
from agents import make_agent, sac
from agents.sac import SACConfig
from envs import make_vector_env
from experiment import divergence, train
from experiment.config import TrainConfig
from experiment.rundir.record import CannotResume
from tests.helpers.fixtures import shared_fixture
from tests.helpers.runs import FAST_SAC, REPO, read_csv, run
from tests.helpers.trees import assert_bit_identical

EXPECTED_FILES = {"config.json", "eval.csv", "train.csv", "diagnostics.csv", "interventions.csv",
                  "0.txt", "1.txt", "done.json", "checkpoints", ".lock"}


def run_args(intervention, utd):
    return [*FAST_SAC, "--num_seeds=2", f"--utd={utd}", "--batch_size=32", "--max_steps=2500",
            "--start_steps=500", "--eval_every=500", "--log_every=1000",
            f"--intervention={intervention}", "--intervention_every=500", "--clip_c=1.2"]


@shared_fixture(params=[("clip", 1), ("reset", 3)], ids=["clip-utd1", "reset-utd3"])
def finished_run(request, tmp_path_factory):
    intervention, utd = request.param
    logdir = tmp_path_factory.mktemp(f"{intervention}{utd}")
    run("run_sac.py", *run_args(intervention, utd), f"--logdir={logdir}")
    run_dir = logdir / "sac" / "cartpole-swingup" / f"{intervention}-utd{utd}-seed0"
    return run_dir, intervention, utd


@pytest.mark.slow
def test_writes_every_file(finished_run):
    run_dir, intervention, utd = finished_run
    assert set(os.listdir(run_dir)) == EXPECTED_FILES
    config = json.loads((run_dir / "config.json").read_text())
    assert config["utd"] == utd and config["intervention"] == intervention
    assert config["agent_config"]["hidden_dims"] == [32, 32]
    assert {"jax", "flax", "mujoco", "dm_control"} <= set(config["versions"])
    assert json.loads((run_dir / "done.json").read_text())["env_step"] == 2500
    assert b"\r" not in (run_dir / "eval.csv").read_bytes(), "plain \\n line ends"
    # Collaborators read the JSON files as they read the CSVs (not owner-only, as mkstemp's).
    mode = stat.S_IMODE((run_dir / "eval.csv").stat().st_mode)
    assert {stat.S_IMODE((run_dir / n).stat().st_mode) for n in ("config.json", "done.json")} \
        == {mode}
    # A finished run keeps its last checkpoint only: the final agent, without the buffer.
    assert [n for n in os.listdir(run_dir / "checkpoints") if n.isdigit()] == ["2500"]
    index = json.loads((run_dir / "checkpoints" / "2500" / "host" / "index.json").read_text())
    assert index and not [name for name in index if name.startswith("buffer/")]


@pytest.mark.slow
def test_eval_rows_and_seed_files(finished_run):
    run_dir, *_ = finished_run
    rows = read_csv(run_dir / "eval.csv")
    assert [(int(r["env_step"]), int(r["seed"])) for r in rows] == [
        (step, seed) for step in range(500, 2501, 500) for seed in (0, 1)]
    for seed in (0, 1):
        lines = (run_dir / f"{seed}.txt").read_text().split("\n")[:-1]
        from_csv = [f"{r['env_step']} {r['return']}" for r in rows if r["seed"] == str(seed)]
        assert lines == from_csv
    returns = np.array([float(r["return"]) for r in rows])
    assert np.all(np.isfinite(returns)) and np.all(returns >= 0)


@pytest.mark.slow
def test_train_metrics_logged(finished_run):
    run_dir, *_ = finished_run
    rows = read_csv(run_dir / "train.csv")
    steps = sorted({int(r["env_step"]) for r in rows})
    assert steps == [1000, 2000, 2500], "every log_every steps, and the last part at the end"
    metrics = {r["metric"] for r in rows}
    assert {"critic_loss", "actor_loss", "temperature", "entropy"} <= metrics
    assert all(np.isfinite(float(r["value"])) for r in rows)


@pytest.mark.slow
def test_interventions_fire_exactly_at_schedule_for_every_seed(finished_run):
    run_dir, intervention, _ = finished_run
    rows = read_csv(run_dir / "interventions.csv")
    events = sorted({(int(r["env_step"]), int(r["seed"]), r["kind"]) for r in rows})
    # Every 500 steps up to max_steps=2500, but not at the last step: nothing trains after it.
    assert events == [(s, seed, intervention) for s in (500, 1000, 1500, 2000) for seed in (0, 1)]
    by = {(r["env_step"], r["seed"], r["network"], r["layer"], r["metric"]): float(r["value"])
          for r in rows}
    layers = {(k[2], k[3]) for k in by}
    assert ("critic", "net/MLP_0/Dense_1[0]") in layers and ("actor", "MLP_0/Dense_0") in layers
    change = [v for k, v in by.items() if k[4] == "fro_change"]
    assert max(change) > 0, "an intervention that changes no weight"
    if intervention == "clip":
        # c = 1.2 puts every singular value into [1/1.2, 1.2]: condition numbers <= 1.44.
        assert all(v <= 1.44 * (1 + 1e-4) for k, v in by.items() if k[4] == "cond_after")
        assert any(v > 1.44 for k, v in by.items() if k[4] == "cond_before")


@pytest.mark.slow
def test_a_scheduled_step_evaluates_the_trained_network_then_intervenes(finished_run):
    """At a step that is both evaluated and scheduled, the evaluation and its diagnostics see
    the network the intervention then starts from (as in the reference implementations, where
    SAC's reset follows the evaluation of its step), not a network just reset or clipped."""
    run_dir, *_ = finished_run
    key = lambda r: (int(r["env_step"]), r["seed"], r["network"], r["layer"])
    logged = {key(r): float(r["value"]) for r in read_csv(run_dir / "diagnostics.csv")
              if r["metric"] == "cond"}
    before = {key(r): float(r["value"]) for r in read_csv(run_dir / "interventions.csv")
              if r["metric"] == "cond_before"}
    assert len(before) > 8 and set(before) <= set(logged)
    for k, value in before.items():
        assert logged[k] == pytest.approx(value, rel=1e-3), k


@pytest.mark.slow
def test_diagnostics_long_format(finished_run):
    run_dir, *_ = finished_run
    rows = read_csv(run_dir / "diagnostics.csv")
    assert set(rows[0]) == {"env_step", "seed", "network", "layer", "metric", "value"}
    assert sorted({int(r["env_step"]) for r in rows}) == [500, 1000, 1500, 2000, 2500]
    metrics = {r["metric"] for r in rows}
    assert {"cond", "stable_rank", "sigma_max", "sigma_min", "fro", "srank", "dormant_tau0",
            "dormant_tau0.025"} <= metrics
    assert {r["network"] for r in rows} == {"actor", "critic", "target_critic"}
    for r in rows:
        value = float(r["value"])
        assert np.isfinite(value)
        if r["metric"].startswith("dormant"):
            assert 0.0 <= value <= 1.0
        if r["metric"] == "cond":
            assert value >= 1.0


@pytest.mark.slow
def test_rerun_of_a_finished_run_does_nothing(finished_run):
    run_dir, intervention, utd = finished_run
    logdir = run_dir.parents[2]
    before = (run_dir / "eval.csv").read_text()
    # The same run directory however --logdir is spelled (a sweep passes absolute paths).
    for spelling in (str(logdir), f"{logdir}/", os.path.relpath(logdir, REPO)):
        proc = run("run_sac.py", *run_args(intervention, utd), f"--logdir={spelling}")
        assert "already finished" in proc.stderr, proc.stderr
    proc = run("run_sac.py", *run_args(intervention, utd), f"--logdir={logdir}",
               "--keep_final_buffer")
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "has already finished; nothing to do (--keep_final_buffer changes nothing here: a run "
        "keeps its replay buffer or not when it finishes)"), proc.stderr
    assert (run_dir / "eval.csv").read_text() == before


@pytest.mark.slow
def test_a_finished_run_on_read_only_storage_is_still_finished(finished_run, tmp_path):
    """Archived read-only, its .lock cannot be opened for writing (here a directory in its
    place, as root writes anywhere): the run is finished, not an unwritable directory."""
    run_dir, intervention, utd = finished_run
    copy = tmp_path / run_dir.relative_to(run_dir.parents[2])
    shutil.copytree(run_dir, copy)
    os.remove(copy / ".lock")
    (copy / ".lock").mkdir()
    for dry_run in ([], ["--dry_run"]):
        proc = run("run_sac.py", *run_args(intervention, utd), f"--logdir={tmp_path}", *dry_run)
        assert "already finished" in proc.stderr or "has finished" in proc.stdout, proc.stderr


def test_help_lists_flags_with_defaults():
    out = run("run_sac.py", "--help", check=False).stdout
    for flag, default in [("utd", "1"), ("max_steps", "1000000"), ("start_steps", "10000"),
                          ("intervention", "none"), ("clip_c", "4.0"),
                          ("intervention_every", "200000"), ("num_seeds", "1"),
                          ("log_std_min", "-10.0"), ("log_std_max", "2.0")]:
        assert f"--{flag}" in out
        assert f"(default: '{default}')" in out.split(f"--{flag}:")[1].split("\n  --")[0]


@pytest.mark.slow
def test_logging_settings_leave_training_as_it_is(tmp_path):
    """The diagnostics draw their replay batch with a generator of their own, so the same seed
    trains on the same minibatches with them on or off, on a batch of any size. The batch
    bounds srank: 16 training transitions (the default), 128 with --diagnostics_batch_size.
    A batch of 400 waits for the buffer to hold it (350 transitions at the first evaluation);
    the weight spectra do not."""
    returns, sranks, steps = {}, {}, {}
    for name, flags in {"on": [], "off": ["--diagnostics=false"],
                        "wide": ["--diagnostics_batch_size=128"],
                        "late": ["--diagnostics_batch_size=400"]}.items():
        logdir = tmp_path / name
        run("run_sac.py", *FAST_SAC, f"--logdir={logdir}", "--max_steps=700", "--batch_size=16",
            "--start_steps=300", "--eval_every=350", *flags)
        run_dir = logdir / "sac" / "cartpole-swingup" / "none-utd1-seed0"
        returns[name] = [(r["env_step"], r["return"]) for r in read_csv(run_dir / "eval.csv")]
        if name != "off":
            rows = read_csv(run_dir / "diagnostics.csv")
            sranks[name] = max(float(r["value"]) for r in rows if r["metric"] == "srank")
            steps[name] = {metric: sorted({int(r["env_step"]) for r in rows
                                           if r["metric"] == metric})
                           for metric in ("cond", "srank")}
    assert len(returns["on"]) == 2 and all(r == returns["on"] for r in returns.values())
    assert sranks["on"] <= 16 < sranks["wide"]
    assert steps["on"] == {"cond": [350, 700], "srank": [350, 700]}
    assert steps["late"] == {"cond": [350, 700], "srank": [700]}


@pytest.mark.slow
def test_a_run_stopped_after_its_last_checkpoint_finishes_on_rerun(tmp_path):
    """The last checkpoint is written at max_steps, mid-episode here (cartpole's episodes are
    1,000 steps); a run killed before done.json finishes on the next launch."""
    args = [*FAST_SAC, f"--logdir={tmp_path}", "--max_steps=400", "--start_steps=300",
            "--eval_every=200"]
    run("run_sac.py", *args)
    run_dir = tmp_path / "sac" / "cartpole-swingup" / "none-utd1-seed0"
    before = (run_dir / "eval.csv").read_text()
    (run_dir / "done.json").unlink()
    # That checkpoint holds no buffer, which nothing needs now; a resume may ask to keep it,
    # and is told that it is gone.
    proc = run("run_sac.py", *args, "--keep_final_buffer")
    assert "resumed from the checkpoint at env step 400" in proc.stderr
    assert "warning: the final checkpoint at env step 400 was written without its replay " \
        "buffer, which --keep_final_buffer cannot bring back" in proc.stderr
    assert json.loads((run_dir / "done.json").read_text())["env_step"] == 400
    assert (run_dir / "eval.csv").read_text() == before


def test_the_eval_envs_are_seeded_by_the_eval_seed_offset(monkeypatch):
    seen = []

    class Stop(Exception):
        pass

    def record(name, seeds, action_repeat=1, backend="dm_control"):
        seen.append(list(seeds))
        if len(seen) == 2:
            raise Stop  # the train and eval envs are made; nothing else is needed
        return make_vector_env(name, seeds, action_repeat, backend)

    monkeypatch.setattr(train, "make_vector_env", record)
    agent = make_agent("sac", SACConfig())
    with pytest.raises(Stop):
        train.Trainer(agent, TrainConfig(env="cartpole-swingup", seed=3, num_seeds=2,
                                         eval_seed_offset=100))
    assert seen == [[3, 4], [103, 104]]


@pytest.mark.slow
def test_episodes_ending_for_some_seeds_only_stop_the_run_naming_them(monkeypatch, tmp_path):
    class FirstSeedEndsEarly:
        """The train env, but seed 3's episode terminates at the third step (as an lqr
        task's does when it reaches its goal) while seed 4's goes on."""

        def __init__(self, env):
            self.env, self.steps = env, 0

        def __getattr__(self, name):
            return getattr(self.env, name)

        def step(self, actions, **kwargs):
            obs, rewards, terminated, truncated = self.env.step(actions, **kwargs)
            self.steps += 1
            if self.steps == 3:
                terminated = np.array([True, False])
            return obs, rewards, terminated, truncated

    made = []

    def make(name, seeds, action_repeat=1, backend="dm_control"):
        env = make_vector_env(name, seeds, action_repeat, backend)
        made.append(env)
        return FirstSeedEndsEarly(env) if len(made) == 1 else env

    monkeypatch.setattr(train, "make_vector_env", make)
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    trainer = train.Trainer(agent, TrainConfig(env="cartpole-swingup", seed=3, num_seeds=2,
                                               max_steps=100, start_steps=50, eval_episodes=1,
                                               progress=False, logdir=str(tmp_path)))
    with pytest.raises(train.UnevenEpisodes, match=r"episodes of seeds \[3\] ended at env step "
                                                   r"3 .* --num_seeds=1"):
        trainer.run()


@pytest.mark.slow
def test_an_update_dispatched_before_its_env_step_trains_as_one_after_it(tmp_path):
    """The loop dispatches a step's update before the env step when its minibatches (drawn and
    gathered during the update before) leave out the slot that step's transition goes to, and
    after it otherwise. Through a small buffer's wrap-arounds and episode ends, with both kinds
    of step, it trains exactly as when every update comes after its env step: the same agents,
    buffer and actions, bit for bit; also where an env step without an update (which only a
    caller outside the loop makes) comes between, changing the buffer that the next
    minibatches were drawn ahead for."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    runs = {}
    for during in (True, False):
        cfg = TrainConfig(env="cartpole-swingup", num_seeds=2, max_steps=1000, start_steps=20,
                          batch_size=8, utd=2, buffer_capacity=60, action_repeat=8,
                          eval_every=1000, diagnostics=False, progress=False,
                          logdir=str(tmp_path / str(during)))
        trainer = train.Trainer(agent, cfg)
        trainer.update_during_env_step = during
        loop, events = trainer.start(), []

        def record(fn, name, events=events):
            return lambda *args, **kwargs: (events.append(name), fn(*args, **kwargs))[1]

        trainer.update_step = record(trainer.update_step, "update")
        trainer.env.step = record(trainer.env.step, "env")
        actions, orders = [], []
        while loop.env_step < 300:
            events.clear()
            if loop.env_step % 50 == 25:
                trainer.env_step(loop)
            trainer.iteration(loop, 0.0)
            actions.append(loop.actions)
            orders.append(tuple(events))
        runs[during] = (loop, trainer.buffer.state_dict(), actions, orders)
    (overlapped, buffer, actions, orders), (serial, serial_buffer, serial_actions, in_turn) = (
        runs[True], runs[False])
    assert set(orders[:19]) == set(in_turn[:19]) == {("env",)}  # the random phase
    assert set(orders[19:]) - {("env", "update", "env"), ("env", "env", "update")} == {
        ("update", "env"), ("env", "update")}
    assert set(in_turn[19:]) - {("env", "env", "update")} == {("env", "update")}

    for got, expected in [(overlapped.states, serial.states), (buffer, serial_buffer),
                          (actions, serial_actions), (overlapped.keys, serial.keys),
                          (overlapped.metric_sums, serial.metric_sums)]:
        assert_bit_identical(got, expected)


@pytest.mark.slow
@pytest.mark.parametrize("start_steps", [0, 20])
def test_actions_come_from_the_agent_as_it_is_after_an_intervention(tmp_path, start_steps):
    """As in Nikishin et al.'s loop, the action after a reset is the reset agent's (it is
    drawn again after the intervention, with the same key), and without a random phase the
    first one is the agent's too."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    trainer = train.Trainer(agent, TrainConfig(
        env="cartpole-swingup", num_seeds=2, max_steps=100, start_steps=start_steps,
        batch_size=8, intervention="reset", intervention_steps=(30,), eval_episodes=1,
        progress=False, logdir=str(tmp_path)))
    loop, started = trainer.start(), time.time()
    if start_steps == 0:
        first_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(trainer.init_keys)
        expected = trainer.next_actions(loop.states, loop.obs, first_keys)
        np.testing.assert_array_equal(loop.actions, expected)
    while loop.env_step < 29:
        trainer.iteration(loop, started)
    trained = loop.states
    trainer.step_and_update = trainer.env_step  # step 30's env step only: the intervention follows
    keys = loop.keys
    trainer.iteration(loop, started)
    assert loop.keys is keys
    reset = trainer.next_actions(loop.states, loop.obs, keys)
    before = trainer.next_actions(trained, loop.obs, keys)
    np.testing.assert_array_equal(loop.actions, reset)
    assert not np.allclose(reset, before)


@pytest.mark.slow
def test_diagnostics_compile_twice_at_most_when_features_wait_for_the_buffer(tmp_path):
    """Weight spectra alone until the buffer holds the diagnostics batch, then everything:
    two programs, compiled once each, whatever the number of evaluations."""
    jax.clear_caches()  # none from an earlier run of the process (make_diagnostics keeps them)
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    cfg = TrainConfig(env="cartpole-swingup", max_steps=120, start_steps=20, batch_size=8,
                      eval_every=20, eval_episodes=1, diagnostics_batch_size=60,
                      progress=False, logdir=str(tmp_path))
    trainer = train.Trainer(agent, cfg)
    trainer.run()
    assert trainer.diagnose.rest._cache_size() == 2
    rows = read_csv(os.path.join(cfg.run_dir, "diagnostics.csv"))
    steps = {m: sorted({int(r["env_step"]) for r in rows if r["metric"] == m})
             for m in ("cond", "srank")}
    assert steps == {"cond": [20, 40, 60, 80, 100, 120], "srank": [60, 80, 100, 120]}


@pytest.mark.slow
@pytest.mark.parametrize("replay_on_device", [False, True])
def test_the_update_is_traced_once(tmp_path, monkeypatch, replay_on_device):
    """The loop's update and the zero metrics it starts from come from one trace of the agent's
    update (tracing a small SAC's update takes about a second)."""
    traced = []

    def update(*args, **kwargs):
        traced.append(1)
        return sac.update(*args, **kwargs)

    monkeypatch.setattr(agents, "sac", SimpleNamespace(**{**vars(sac), "update": update}))
    # An empty agent cache (restored after the test): make_agent would otherwise give, for this
    # config and its hooks, the agent an earlier test made from the module as it was.
    monkeypatch.setattr(agents, "_built", functools.lru_cache(agents._built.__wrapped__))
    agent = agents.make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    cfg = TrainConfig(env="cartpole-swingup", max_steps=40, start_steps=20, batch_size=8,
                      eval_every=40, eval_episodes=1, diagnostics=False, progress=False,
                      replay_on_device=replay_on_device, logdir=str(tmp_path))
    train.make_trainer(agent, cfg).run()
    assert len(traced) == 1


@pytest.mark.slow
def test_a_restored_loop_holds_no_map_of_its_checkpoint_and_is_placed_as_a_fresh_one(tmp_path):
    """The checkpoint's host arrays are restored as read-only maps of its files; the loop
    copies what it keeps, so a finished run can delete that checkpoint with nothing mapped.
    Its device arrays are placed as a fresh loop's (committed to the default device): a program
    lowers an argument's placement with it, so otherwise every program a resumed run calls
    would miss JAX's compilation cache (compiled again at each resume)."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    cfg = TrainConfig(env="cartpole-swingup", max_steps=500, start_steps=20, batch_size=8,
                      eval_every=500, eval_episodes=1, checkpoint_every=250, action_repeat=4,
                      diagnostics=False, progress=False, logdir=str(tmp_path))
    trainer = train.Trainer(agent, cfg)
    loop = trainer.start()
    while loop.env_step < 250:
        trainer.iteration(loop, 0.0)
    assert trainer.last_checkpoint == 250
    restored = train.Trainer(agent, cfg).start()  # resumes from the checkpoint at 250
    host = [restored.obs, restored.actions, *restored.env_rng.values()]
    assert restored.env_step == 250 and not any(isinstance(a, np.memmap) for a in host)
    assert all(a.flags.writeable for a in host)
    placed = [(x.committed, x.sharding) for x in
              jax.tree.leaves((loop.states, loop.keys, loop.metric_sums))]
    assert placed == [(x.committed, x.sharding) for x in
                      jax.tree.leaves((restored.states, restored.keys, restored.metric_sums))]


@pytest.mark.slow
def test_a_final_checkpoint_keeps_the_buffer_only_when_asked(tmp_path):
    """A finished run's final checkpoint leaves the replay buffer out unless
    --keep_final_buffer; training on from one without it is refused, not done on an empty
    buffer (a command line cannot ask for it, since --max_steps must match: this goes
    around that check)."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    for keep in (False, True):
        cfg = TrainConfig(env="cartpole-swingup", max_steps=250, start_steps=20, batch_size=8,
                          eval_every=250, eval_episodes=1, checkpoint_every=100, action_repeat=4,
                          diagnostics=False, progress=False, logdir=str(tmp_path / str(keep)),
                          keep_final_buffer=keep)
        train.Trainer(agent, cfg).run()  # one checkpoint, at 250: the first episode end
        checkpoints = os.path.join(cfg.run_dir, "checkpoints")
        assert [n for n in os.listdir(checkpoints) if n.isdigit()] == ["250"]
        with open(os.path.join(checkpoints, "250", "host", "index.json")) as f:
            assert any(name.startswith("buffer/") for name in json.load(f)) == keep
        longer = train.Trainer(agent, dataclasses.replace(cfg, max_steps=500))
        if keep:
            assert longer.start().env_step == 250 and len(longer.buffer) == 250
        else:
            with pytest.raises(CannotResume, match="saved without its replay buffer"):
                longer.start()


@pytest.mark.slow
def test_a_clip_that_changes_no_weight_changes_nothing_in_the_run(tmp_path):
    """With c large enough that no singular value is outside [1/c, c], a clipped run is the
    run without interventions, bit for bit: clip and no clip stay a paired comparison."""
    args = [*FAST_SAC, "--max_steps=1200", "--start_steps=300", "--eval_every=600",
            "--log_every=600", "--batch_size=32", "--diagnostics=false"]
    run("run_sac.py", *args, f"--logdir={tmp_path}", "--intervention=none")
    run("run_sac.py", *args, f"--logdir={tmp_path}", "--intervention=clip",
        "--intervention_every=400", "--clip_c=1e6")
    runs = tmp_path / "sac" / "cartpole-swingup"
    changes = [float(r["value"]) for r in read_csv(runs / "clip-utd1-seed0" / "interventions.csv")
               if r["metric"] == "fro_change"]
    assert len(changes) > 1 and not any(changes)  # clips at steps 400 and 800 changed nothing
    for name in ("eval.csv", "train.csv"):
        rows = [read_csv(runs / f"{i}-utd1-seed0" / name) for i in ("none", "clip")]
        for row in rows[0] + rows[1]:
            row.pop("wall_time", None)
        assert rows[0] == rows[1]


@pytest.mark.slow
def test_an_intervention_that_leaves_nan_weights_is_a_divergence(tmp_path):
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    trainer = train.Trainer(agent, TrainConfig(
        env="cartpole-swingup", max_steps=100, start_steps=20, batch_size=8,
        intervention="clip", intervention_steps=(30,), eval_episodes=1, progress=False,
        logdir=str(tmp_path)))
    apply = trainer.intervention.apply

    def poisoned(states, env_step):
        states, rows = apply(states, env_step)
        nan = jax.tree.map(lambda x: x * np.nan, states.actor.params)
        return states.replace(actor=states.actor.replace(params=nan)), rows

    trainer.intervention = trainer.intervention._replace(apply=poisoned)
    with pytest.raises(divergence.Diverged, match="at env step 30 for seed 0"):
        trainer.run()
    assert json.loads((tmp_path / "sac" / "cartpole-swingup" / "clip-utd1-seed0" /
                       "diverged.json").read_text())["env_step"] == 30


def test_a_loss_past_the_limit_is_warned_about_once_and_recorded(tmp_path, capsys):
    """A finite loss past divergence.LOSS_LIMIT (growing without bound) gives one warning line per
    loss and its first crossing in loss_warnings.json; other metrics (Q) and NaN or inf
    values (a divergence, which stops the run) are not its business."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    trainer = train.Trainer(agent, TrainConfig(
        env="cartpole-swingup", seed=3, num_seeds=2, max_steps=100, start_steps=20,
        batch_size=8, eval_every=100, eval_episodes=1, diagnostics=False, progress=False,
        logdir=str(tmp_path)))
    trainer.check_losses(1000, {"critic_loss": np.array([3.0, 1.5e26]),
                                "actor_loss": np.array([np.inf, -2.0]),
                                "q": np.array([1e30, 0.0])})
    trainer.check_losses(2000, {"critic_loss": np.array([2e27, 2e27]),
                                "actor_loss": np.array([-1e11, 0.0])})
    lines = capsys.readouterr().err.strip().splitlines()
    path = os.path.join(trainer.cfg.run_dir, "loss_warnings.json")
    assert lines == [
        f"warning: critic_loss of seed 4 is 1.5e+26 at env step 1000, past 1e+10: a loss that "
        f"grows without bound usually means a broken run; recorded in {path}",
        f"warning: actor_loss of seed 3 is -1e+11 at env step 2000, past 1e+10: a loss that "
        f"grows without bound usually means a broken run; recorded in {path}"]
    with open(path) as f:
        assert json.load(f) == {"limit": 1e10, "losses": {
            "critic_loss": {"env_step": 1000, "seed": 4, "value": 1.5e26},
            "actor_loss": {"env_step": 2000, "seed": 3, "value": -1e11}}}


@pytest.mark.slow
def test_the_python_entry_point_trains_what_the_script_trains(tmp_path):
    """experiment.entry.train, in this process, and run_sac.py give the same run: eval.csv and
    interventions.csv equal value for value (wall times aside)."""
    from experiment import entry
    from experiment.config import SAC_DEFAULTS

    settings = {"max_steps": 600, "start_steps": 200, "eval_every": 300,
                "intervention": "clip", "intervention_steps": (400,), "num_seeds": 2}
    cfg = dataclasses.replace(SAC_DEFAULTS, env="cartpole-swingup", eval_episodes=1,
                              progress=False, logdir=str(tmp_path / "python"), **settings)
    in_process = entry.train(cfg, SACConfig(hidden_dims=(32, 32)))
    assert entry.train(cfg, SACConfig(hidden_dims=(32, 32))) == in_process  # done: no retrain
    run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path / 'script'}", "--max_steps=600",
        "--start_steps=200", "--eval_every=300", "--intervention=clip",
        "--intervention_steps=400", "--num_seeds=2", timeout=240, separate=True)
    by_script = tmp_path / "script" / "sac" / "cartpole-swingup" / "clip-utd1-seed0"
    assert os.path.realpath(in_process) == str(tmp_path / "python" / "sac" / "cartpole-swingup"
                                               / "clip-utd1-seed0")

    def rows(run_dir, name):
        return [{k: v for k, v in r.items() if k != "wall_time"}
                for r in read_csv(os.path.join(run_dir, name))]

    for name in ("eval.csv", "interventions.csv"):
        assert rows(in_process, name) == rows(by_script, name) != []


@pytest.mark.slow
def test_a_config_run_again_in_the_process_compiles_nothing_and_matches(tmp_path):
    """A second run of a config in one process (a notebook's) calls the programs compiled for
    the first: the agent (agents.make_agent), its step functions (experiment/step_fns.py), the
    event's and the diagnostics' programs are made once per process. It lowers no program
    (none compiled, none loaded from the cache), traces only the plan check's abstract inits of
    the per-step methods, and its files equal the first run's."""
    from experiment import entry
    from experiment.config import SAC_DEFAULTS

    def config(name):
        return dataclasses.replace(
            SAC_DEFAULTS, env="cartpole-swingup", eval_episodes=1, progress=False,
            logdir=str(tmp_path / name), max_steps=250, start_steps=100, eval_every=125,
            action_repeat=8, batch_size=32, num_seeds=2, intervention="nap+clip",
            intervention_steps=(200,), clip_c=1.1)

    agent_config = SACConfig(hidden_dims=(32, 32))
    first = entry.train(config("first"), agent_config)
    plan = entry.prepare(config("second"), agent_config).plan
    per_step_parts = [p for b in plan.bound if b.method.kind != "event" for p in b.parts]
    traced, lowered = [], []

    def listen(name, secs, fun_name="", **kwargs):
        if name == "/jax/core/compile/jaxpr_trace_duration":
            traced.append(fun_name)
        if name == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            lowered.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        second = entry.train(config("second"), agent_config)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert lowered == [] and traced == ["<lambda>"] * len(per_step_parts) != [], (traced, lowered)

    def rows(run_dir, name):
        return [{k: v for k, v in r.items() if k != "wall_time"}
                for r in read_csv(os.path.join(run_dir, name))]

    for name in ("eval.csv", "interventions.csv", "diagnostics.csv"):
        assert rows(first, name) == rows(second, name) != []


def test_the_prepared_agent_with_its_hooks_is_the_one_the_trainer_trains(tmp_path, monkeypatch):
    """entry.prepare builds the agent, its plan and the agent bound to the plan's hooks once;
    the trainer takes them as they are and builds no agent of its own."""
    from experiment import entry, events
    from experiment.config import SAC_DEFAULTS

    cfg = dataclasses.replace(SAC_DEFAULTS, env="cartpole-swingup", intervention="nap+clip",
                              logdir=str(tmp_path), num_seeds=1)
    built = []
    monkeypatch.setattr(events, "make_agent", lambda *a: built.append(a) or make_agent(*a))
    prepared = entry.prepare(cfg, SACConfig(hidden_dims=(16, 16)))
    assert len(built) == 1 and built[0][2] is prepared.plan.hooks  # the hooked agent, once
    trainer = train.make_trainer(prepared.agent, cfg, prepared.plan)
    assert trainer.agent is prepared.agent and trainer.plan is prepared.plan and len(built) == 1
    # Without a plan the trainer builds it and binds its hooks, as before: to the same agent,
    # which make_agent gives again for the same config and hooks.
    assert train.make_trainer(make_agent("sac", SACConfig(hidden_dims=(16, 16))),
                              cfg).agent is prepared.agent and len(built) == 2
