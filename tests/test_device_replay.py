"""Replay on the device (--replay_on_device): the transitions the host buffer holds, uniform
draws over each seed's filled slots, a step that sends one transition per seed, exact resume,
and a buffer too large for the device refused before anything is compiled."""

import signal
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from agents import make_agent
from agents.sac import SACConfig
from experiment import resources, train
from experiment.config import TrainConfig
from experiment.device_loop import DeviceReplayTrainer
from replay import ReplayBuffer
from replay import device as device_replay
from replay.device import DeviceReplayBuffer
from tests.helpers import forkserver
from tests.helpers.runs import FAST_SAC, KILLSAVE, REPO, read_csv, run, script

SEEDS, OBS, ACT = 3, 4, 2


def fill(buffers, inserts: int, rng: np.random.Generator, episode: int = 7) -> None:
    """The same `inserts` env steps into each buffer: episodes of `episode` steps, the last
    of each truncated, and a termination of seed 1 every 5th step."""
    obs = rng.normal(size=(SEEDS, OBS)).astype(np.float32)
    for t in range(inserts):
        action = rng.uniform(-1, 1, (SEEDS, ACT)).astype(np.float32)
        reward = rng.normal(size=SEEDS).astype(np.float32)
        next_obs = rng.normal(size=(SEEDS, OBS)).astype(np.float32)
        terminated = np.array([False, t % 5 == 4, False])
        truncated = np.full(SEEDS, t % episode == episode - 1) & ~terminated
        for buffer in buffers:
            buffer.insert(obs, action, reward, next_obs, terminated, truncated)
        ended = terminated | truncated
        obs = np.where(ended[:, None], rng.normal(size=(SEEDS, OBS)).astype(np.float32),
                       next_obs)


@pytest.mark.parametrize("inserts", [1, 13, 40, 97])
def test_gathers_the_transitions_the_host_buffer_holds(inserts):
    """Before and after the rings wrap (capacity 40), with episode ends and terminations: the
    minibatches at any filled slots are the host buffer's, bit for bit."""
    host = ReplayBuffer(SEEDS, 40, OBS, ACT, episode_length_hint=7)
    device = DeviceReplayBuffer(SEEDS, 40, OBS, ACT, seeds=[0, 1, 2])
    fill([host, device], inserts, np.random.default_rng(inserts))
    assert len(device) == len(host) == min(inserts, 40)
    assert device.next_slot == host.next_slot
    slots = np.random.default_rng(0).integers(0, len(host), (SEEDS, 3, 64))
    expected = host.gather(slots)
    got = jax.device_get(device_replay.gather(device.replay, jnp.asarray(slots, jnp.int32)))
    for key, value in expected.items():
        np.testing.assert_array_equal(getattr(got, key), value, err_msg=key)


@pytest.mark.parametrize("inserts,capacity", [(37, 64), (150, 64)])
def test_draws_are_uniform_over_each_seed_s_filled_slots(inserts, capacity):
    """A chi-square test per seed (fixed seeds: the same draws every run) over the slots the
    ring holds (37 of 64 before it wraps; all 64 after); with `ahead`, over those it holds
    after the next insert. Each of the 12 tests here must reach p > 1e-4 (a uniform sampler
    fails one with probability 1.2e-3). The seeds draw independently."""
    buffer = DeviceReplayBuffer(SEEDS, capacity, OBS, ACT, seeds=[10, 11, 12])
    fill([buffer], inserts, np.random.default_rng(0))
    filled = min(inserts, capacity)
    for ahead, slots_held in ((False, filled), (True, min(filled + 1, capacity))):
        slots = np.asarray(device_replay.draw(buffer.replay, 500, 80, ahead=ahead))
        assert slots.shape == (SEEDS, 80, 500)
        assert slots.min() == 0 and slots.max() == slots_held - 1
        for seed in range(SEEDS):
            counts = np.bincount(slots[seed].ravel(), minlength=slots_held)
            assert stats.chisquare(counts).pvalue > 1e-4, (ahead, seed)
        assert not np.array_equal(slots[0], slots[1])


@pytest.mark.slow
def test_draws_depend_on_the_buffer_state_alone():
    """The same state draws the same slots (a restored buffer draws what the original would);
    each insert moves the draws on."""
    a = DeviceReplayBuffer(SEEDS, 50, OBS, ACT, seeds=[0, 1, 2])
    fill([a], 30, np.random.default_rng(0))
    b = DeviceReplayBuffer(SEEDS, 50, OBS, ACT, seeds=[0, 1, 2])
    b.load_state_dict(a.state_dict())
    first = np.asarray(device_replay.draw(a.replay, 16, 2))
    np.testing.assert_array_equal(first, device_replay.draw(b.replay, 16, 2))
    for name, array in a.state_dict().items():
        np.testing.assert_array_equal(array, b.state_dict()[name], err_msg=name)
    fill([a], 1, np.random.default_rng(1))
    assert not np.array_equal(first, device_replay.draw(a.replay, 16, 2))


def test_state_dict_holds_the_filled_slots_only_and_refuses_another_buffer_s():
    buffer = DeviceReplayBuffer(SEEDS, 50, OBS, ACT, seeds=[0, 1, 2])
    fill([buffer], 12, np.random.default_rng(0))
    state = buffer.state_dict()
    assert state["observations"].shape == (SEEDS, 12, OBS) and state["size"] == 12
    with pytest.raises(ValueError, match="capacity 50"):
        DeviceReplayBuffer(SEEDS, 60, OBS, ACT, seeds=[0, 1, 2]).load_state_dict(state)
    host = ReplayBuffer(SEEDS, 50, OBS, ACT)
    with pytest.raises(ValueError, match="state keys"):
        buffer.load_state_dict(host.state_dict())


def small_config(tmp_path, **kwargs) -> TrainConfig:
    return TrainConfig(**{**dict(env="cartpole-swingup", num_seeds=2, max_steps=600,
                                 start_steps=20, batch_size=8, utd=2, buffer_capacity=60,
                                 action_repeat=8, eval_every=1000, diagnostics=False,
                                 progress=False, replay_on_device=True,
                                 logdir=str(tmp_path)), **kwargs})


@pytest.mark.slow
def test_a_step_sends_one_transition_per_seed_and_takes_the_actions_back(tmp_path,
                                                                         monkeypatch):
    """Past the random phase, away from episode ends, a training step makes no implicit
    host-to-device transfer (minibatches included) and sends explicitly the step's next
    observations, rewards and terminations: obs_dim + 1 float32s and a bool per seed. The host
    replay's loop sends its minibatches (the guard refuses it)."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    trainer = train.make_trainer(agent, small_config(tmp_path))
    assert isinstance(trainer, DeviceReplayTrainer)
    loop = trainer.start()
    while loop.env_step < 40:
        trainer.step_and_update(loop)
    sent = []
    put = jax.device_put
    with monkeypatch.context() as patch, jax.transfer_guard_host_to_device("disallow"):
        patch.setattr(jax, "device_put", lambda x, *a, **k: (sent.append(np.asarray(x).nbytes),
                                                             put(x, *a, **k))[1])
        for _ in range(5):  # env steps 41-45 of a 125-step episode
            sent.clear()
            trainer.step_and_update(loop)
            assert sum(sent) == trainer.cfg.num_seeds * ((trainer.obs_dim + 1) * 4 + 1)
    host = train.Trainer(agent, small_config(tmp_path / "host", replay_on_device=False))
    loop = host.start()
    while loop.env_step < 40:
        host.step_and_update(loop)
    with jax.transfer_guard_host_to_device("disallow"), pytest.raises(Exception,
                                                                       match="Disallowed"):
        host.step_and_update(loop)


@pytest.mark.slow
def test_an_update_dispatched_before_its_env_step_trains_as_one_after_it(tmp_path):
    """As for the host replay: through the small ring's wrap-arounds and episode ends, whether
    each update goes before the env step (when its slots leave out the one the step writes) or
    always after it, the agents, buffer and actions are the same, bit for bit."""
    agent = make_agent("sac", SACConfig(hidden_dims=(8, 8)))
    runs, orders = {}, {}
    for during in (True, False):
        trainer = DeviceReplayTrainer(agent, small_config(tmp_path / str(during)))
        trainer.update_during_env_step = during
        loop, events = trainer.start(), []
        update, step = trainer.device_update, trainer.env.step
        trainer.device_update = lambda *a, f=update, e=events: (e.append("update"), f(*a))[1]
        trainer.env.step = lambda *a, f=step, e=events, **k: (e.append("env"), f(*a, **k))[1]
        actions, orders[during] = [], set()
        while loop.env_step < 300:
            events.clear()
            trainer.iteration(loop, 0.0)
            actions.append(loop.actions)
            orders[during].add(tuple(events))
        runs[during] = (loop, trainer.buffer.state_dict(), actions)
    assert orders[True] == {("env",), ("update", "env"), ("env", "update")}
    assert orders[False] == {("env",), ("env", "update")}
    (fast, fast_buffer, fast_actions), (slow, slow_buffer, slow_actions) = runs[True], runs[False]
    for got, expected in [(fast.states, slow.states), (fast.keys, slow.keys),
                          (fast.metric_sums, slow.metric_sums)]:
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
            np.testing.assert_array_equal(jax.random.key_data(a) if jax.dtypes.issubdtype(
                a.dtype, jax.dtypes.prng_key) else a, jax.random.key_data(b) if
                jax.dtypes.issubdtype(b.dtype, jax.dtypes.prng_key) else b)
    for name, array in fast_buffer.items():
        np.testing.assert_array_equal(array, slow_buffer[name], err_msg=name)
    np.testing.assert_array_equal(np.stack(fast_actions), np.stack(slow_actions))


ARGS = [*FAST_SAC, "--replay_on_device", "--num_seeds=2", "--utd=2", "--action_repeat=8",
        "--batch_size=32", "--max_steps=500", "--start_steps=100", "--eval_every=125",
        "--log_every=125", "--checkpoint_every=125", "--buffer_capacity=300"]


def _returns(logdir):
    rows = read_csv(logdir / "sac" / "cartpole-swingup" / "none-utd2-seed0" / "eval.csv")
    return [(r["env_step"], r["seed"], r["return"]) for r in rows]


@pytest.mark.slow
def test_a_run_trains_and_one_killed_and_resumed_matches_it(tmp_path):
    """A run with the buffer on the device trains (finite losses, returns that change); one
    SIGKILLed while writing its 3rd checkpoint (env step 375; the ring of 300 has wrapped)
    and started again writes the same eval returns, bit for bit."""
    run("run_sac.py", *ARGS, f"--logdir={tmp_path / 'full'}")
    full = tmp_path / "full" / "sac" / "cartpole-swingup" / "none-utd2-seed0"
    losses = [float(r["value"]) for r in read_csv(full / "train.csv")
              if r["metric"] == "critic_loss"]
    assert losses and np.isfinite(losses).all()
    expected = _returns(tmp_path / "full")
    assert len(expected) == 8 and len({r[2] for r in expected}) > 4
    args = [*ARGS, f"--logdir={tmp_path / 'killed'}"]
    killed = forkserver.run([sys.executable, KILLSAVE, "3",
                             script("run_sac.py"), *args], cwd=REPO, capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run("run_sac.py", *args)
    assert "resumed from the checkpoint at env step 250" in resumed.stderr
    assert _returns(tmp_path / "killed") == expected


@pytest.mark.slow
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_buffer_too_large_for_the_device_is_refused_naming_the_sizes(tmp_path, dry_run):
    """2e9 slots per seed of cartpole's transitions (49 bytes each with the next observation)
    are 182.5 GiB for 2 seeds, more than this machine's memory: refused before compiling,
    in one line that gives both sizes and the flags that set them."""
    need = device_replay.replay_nbytes(2, 2_000_000_000, 5, 1)
    have = resources.device_memory_bytes(jax.devices()[0])
    assert need > have
    proc = run("run_sac.py", *FAST_SAC, "--replay_on_device", "--num_seeds=2",
               "--buffer_capacity=2000000000", f"--logdir={tmp_path}",
               *(["--dry_run"] if dry_run else []), check=False, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert "replay buffer on the device" in lines[-1] and "--buffer_capacity" in lines[-1]
    assert f"{need / 2**30:,.1f} GiB" in lines[-1] and f"{have / 2**30:,.1f} GiB" in lines[-1]


def test_a_capacity_past_the_device_ring_s_counters_is_refused(tmp_path):
    proc = run("run_sac.py", *FAST_SAC, "--replay_on_device", f"--buffer_capacity={2**31}",
               f"--logdir={tmp_path}", check=False)
    assert proc.returncode == 2
    assert "--buffer_capacity" in proc.stderr and "--replay_on_device" in proc.stderr
