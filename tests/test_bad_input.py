"""Every bad setting is one clear line on stderr and exit code 2, before anything is built."""

import dataclasses
import errno
import fcntl
import json
import os
import re

import jax
import pytest

from agents import make_agent
from agents.bro_state import BROConfig
from agents.sac import SACConfig
from experiment import resources, step_fns, train
from experiment.config import ConfigError, TrainConfig
from experiment.rundir.lock import lock_run_dir
from experiment.rundir.record import config_record, write_json
from experiment.rundir.resume import resume_state
from experiment.setting_warnings import (
    diagnostics_warning,
    early_warning,
    schedule_warning,
    seed_warning,
    unused_flags_warning,
)
from replay import buffer
from tests.helpers.runs import FAST_SAC, run, run_patched

CASES = {
    "unknown env": (["--env=humanoid-stnd"], "did you mean 'humanoid-stand'?"),
    "utd below 1": (["--utd=0"], "--utd must be positive"),
    "c below 1": (["--clip_c=0.5", "--intervention=clip"], "--clip_c must be a finite number >= 1"),
    "c not a number": (["--clip_c=nan", "--intervention=clip"], "got nan"),
    "c infinite": (["--clip_c=inf", "--intervention=clip"], "--clip_c must be a finite number"),
    "nan learning rate": (["--critic_lr=nan"], "--critic_lr must be a finite number, got nan"),
    "infinite init scale": (["--init_scale=inf"], "--init_scale must be a finite number"),
    "log-std bounds crossed": (["--log_std_min=3"], "--log_std_min and log_std_max must satisfy "
                               "-80 <= min < max <= 80 (exp of them is a float32), got 3.0 and "
                               "2.0"),
    "action repeat past an episode": (["--action_repeat=1001"], "--action_repeat must be from 1 "
                                      "to 1000 (an episode's control steps), got 1001"),
    "blank run name": (["--run_name= "], "--run_name is blank (' ')"),
    "width past int32": (["--hidden_dim=2147483648"], "--hidden_dim must be at most 2**31 - 1 "
                         "(2,147,483,647), the largest array dimension, got 2,147,483,648"),
    "seeds past 2**32": (["--seed=4294967290", "--num_seeds=2"], "give env seeds up to "
                         "4294967333; dm_control takes seeds below 2**32"),
    "more seeds than a process trains": (["--num_seeds=10000", "--dry_run"], "--num_seeds=10,000 "
                                         "is more than one process trains: at most 1,000"),
    "non-positive max_steps": (["--max_steps=0"], "--max_steps must be positive"),
    "non-positive eval interval": (["--eval_every=0"], "--eval_every must be positive"),
    "non-positive intervention interval": (["--intervention=reset", "--intervention_every=-5"],
                                           "--intervention_every must be positive"),
    "intervention list not increasing": (["--intervention=clip",
                                          "--intervention_steps=2000,1000"],
                                         "strictly increasing"),
    "intervention list not integers": (["--intervention=clip", "--intervention_steps=1e3"],
                                       "list of integers"),
    "start_steps past max_steps": (["--start_steps=5000", "--max_steps=1000"],
                                   "--start_steps=5000 leaves no training"),
    "steps without an intervention": (["--intervention_steps=100,200"], "contradicts"),
    "unknown intervention": (["--intervention=clp"], "unknown intervention 'clp'; accepted: "
                                                     "none, reset, clip"),
    "two events": (["--intervention=reset,clip"], "--intervention=reset,clip: reset and clip "
                                                  "are both events"),
    "not a number": (["--utd=eight"], "flag --utd=eight"),
    "stray argument": (["humanoid-stand"], "unexpected arguments"),
    "run name outside its env's directory": (["--run_name=../../x"], "--run_name must be one "
                                             "directory name"),
    "empty logdir": (["--logdir="], "--logdir is empty; give the directory the results tree "
                     "goes under"),
    "no critics": (["--num_critics=0"], "--num_critics must be positive, got 0"),
    "tau above 1": (["--tau=2"], "--tau must be in (0, 1], got 2.0"),
    "ns steps below 1": (["--intervention=clip", "--clip_method=newton_schulz",
                          "--clip_ns_steps=0"], "--clip_ns_steps must be a positive int, got 0"),
    "ns steps with the svd clip": (["--intervention=clip", "--clip_ns_steps=8"],
                                   "--clip_ns_steps=8 needs --clip_method=newton_schulz"),
    "negative dormant tau": (["--dormant_taus=0,-0.1"], "--dormant_taus must be finite "
                             "thresholds >= 0, got [0.0, -0.1]"),
    "dormant taus not numbers": (["--dormant_taus=0,low"], "--dormant_taus must be a "
                                 "comma-separated list of numbers, got '0,low'"),
    "dormant taus repeated": (["--dormant_taus=0,0.025,0.0250000001"],
                              "--dormant_taus repeats a threshold (0,0.025,0.025 as "),
    "srank threshold above 1": (["--srank_threshold=1.5"], "--srank_threshold must be in (0, 1]"),
    "negative diagnostics batch": (["--diagnostics_batch_size=-1"], "--diagnostics_batch_size "
                                   "must be from 1 to --buffer_capacity=1000000, or 0 for "
                                   "--batch_size, got -1"),
    "diagnostics batch above the buffer": (["--buffer_capacity=500",
                                            "--diagnostics_batch_size=501"],
                                           "--diagnostics_batch_size must be from 1 to "
                                           "--buffer_capacity=500"),
    "negative eval seed offset": (["--eval_seed_offset=-1"], "--eval_seed_offset must be >= 0"),
    "buffer past the uint32 ordinals": (["--buffer_capacity=3000000000"], "--buffer_capacity "
                                        "must be at most 2**31 (2,147,483,648) transitions per "
                                        "seed, got 3,000,000,000"),
    "update call past 2**31 transitions": (["--utd=100000000"], "--num_seeds x --utd x "
                                           "--batch_size = 25,600,000,000 transitions in one "
                                           "update call; at most 2**31"),
    "brackets in the run directory": (["--run_name=clip[c4]"], "has '[' or ']' in its path; "
                                      "checkpoints written below such a path cannot be restored"),
    "zero init scale": (["--init_scale=0"], "--init_scale must be positive, got 0.0"),
    "clip parts without clip": (["--intervention=reset", "--clip_parts=actor.params"],
                                "--clip_parts=actor.params contradicts --intervention=reset"),
    "unknown clip part": (["--intervention=clip", "--clip_parts=actor.nope"],
                          "--clip_parts: unknown part 'actor.nope'"),
    "clip part without a weight matrix": (["--intervention=clip", "--clip_parts=temp.params"],
                                          "--clip_parts=temp.params holds no weight matrix (a "
                                          "kernel), so clip would change nothing there; "
                                          "the parts it acts on by default: actor.params,"
                                          "critic.params,target_critic_params"),
    "clip part that is a kernel": (["--intervention=clip",
                                    "--clip_parts=actor.params.MLP_0.Dense_0.kernel"],
                                   "names a kernel itself; name the layer that holds it "
                                   "(actor.params.MLP_0.Dense_0) or a part above it"),
    "clip part with optimizer state": (["--intervention=clip", "--clip_parts=actor"],
                                       "--clip_parts=actor includes the optimizer state "
                                       "actor.opt_state, which clip must not touch; "
                                       "name its parameters instead: actor.params"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_flag_is_one_line_and_exit_2(case, tmp_path):
    args, expected = CASES[case]
    logdir = tmp_path / "runs"
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={logdir}", *args, check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert expected in lines[0]
    assert not logdir.exists(), "nothing is written for a rejected command"


@pytest.mark.slow
@pytest.mark.parametrize("name, flags, warning", [
    ("run_sac.py", [*FAST_SAC, "--intervention=clip", "--clip_sides=upper"], None),
    # BRO resets by default; --clip_ns_steps without newton_schulz is an error only with clip
    ("run_bro.py", ["--env=dog-run", "--utd=2", "--clip_sides=upper", "--clip_ns_steps=3"],
     "warning: --clip_sides, --clip_ns_steps are not read (clip's settings act only with "
     "--intervention=clip, not reset); config.json records them all the same, and a resume "
     "compares every setting")])
def test_dry_run_checks_the_settings_and_trains_nothing(tmp_path, name, flags, warning):
    proc = run(name, *flags, f"--logdir={tmp_path}/runs", "--dry_run", timeout=60)
    assert "settings checked; " in proc.stdout and "would be trained" in proc.stdout
    assert [line for line in proc.stderr.splitlines() if " not read (" in line] == (
        [warning] if warning else [])
    assert not (tmp_path / "runs").exists()
    bad = run(name, *flags, "--clip_c=0.5", f"--logdir={tmp_path}/runs", "--dry_run",
              check=False, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith(
        "error: --clip_c must be a finite number >= 1")


@pytest.mark.slow
def test_dry_run_checks_the_run_directory(tmp_path):
    """As a run checks it, in the code both run scripts share (experiment/runner.py)."""
    name, flags = "run_sac.py", FAST_SAC
    proc = run(name, *flags, f"--logdir={tmp_path}/runs", "--dry_run", timeout=60)
    run_dir = proc.stdout.split("settings checked; ")[1].split(" would be trained")[0]
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({"utd": 99}, f)  # a run of other settings: refused, as a run refuses it
    other = run(name, *flags, f"--logdir={tmp_path}/runs", "--dry_run", check=False, timeout=60)
    assert other.returncode == 2 and "holds a run with different settings" in other.stderr
    held = lock_run_dir(run_dir)  # as a process training it holds it: checked first
    in_use = run(name, *flags, f"--logdir={tmp_path}/runs", "--dry_run", check=False,
                 timeout=60)
    held.close()
    assert in_use.returncode == 75 and "is being trained by pid" in in_use.stderr
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    lost = run(name, *flags, f"--logdir={tmp_path}/dangling/runs", "--dry_run", check=False,
               timeout=60)
    assert lost.returncode == 2 and "cannot write to the run directory" in lost.stderr
    (tmp_path / "a_file").write_text("not a directory")  # checked without creating anything
    unwritable = run(name, *flags, f"--logdir={tmp_path}/a_file/runs", "--dry_run", check=False,
                     timeout=60)
    assert unwritable.returncode == 2 and "cannot write to the run directory" in unwritable.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_dry_run_refuses_a_folder_where_nothing_can_be_made_even_for_root(tmp_path):
    """/proc passes permission checks for root (as CI and containers often run), yet refuses
    every mkdir: the dry run's probe folder finds that out, and leaves nothing behind."""
    from experiment.rundir.claim import check_writable

    with pytest.raises(ConfigError, match="cannot write to the run directory /proc/nope/runs"):
        check_writable("/proc/nope/runs", create=False)
    check_writable(str(tmp_path / "runs" / "sac"), create=False)
    assert list(tmp_path.iterdir()) == []


def test_a_filesystem_that_refuses_modes_still_gets_the_json_files(tmp_path, monkeypatch):
    def refuse(fd, mode):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refuse)
    write_json(str(tmp_path / "config.json"), {"utd": 1})
    assert json.loads((tmp_path / "config.json").read_text()) == {"utd": 1}
    assert os.listdir(tmp_path) == ["config.json"]  # no temporary file left


def test_unwritable_logdir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={blocker}/runs", check=False, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write to the run directory" in lines[0]


def test_a_run_directory_too_long_for_its_checkpoints_is_refused_before_training(tmp_path):
    from experiment.rundir.claim import CHECKPOINT_PATH_ROOM, PATH_MAX, check_writable

    logdir = str(tmp_path / "/".join(["d" * 200] * 20))[:PATH_MAX - CHECKPOINT_PATH_ROOM + 10]
    for create in (False, True):
        with pytest.raises(ConfigError, match=r"the run directory's path is \d+ bytes long; "
                                              r"its checkpoints' files need up to 256 more"):
            check_writable(logdir, create=create)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_running_out_of_memory_is_one_line_naming_the_buffer(tmp_path, monkeypatch):
    """numpy's MemoryError building the buffer (a --buffer_capacity too large for the RAM)."""
    def full(*args, **kwargs):
        raise MemoryError("Unable to allocate 37.3 GiB")

    monkeypatch.setattr(buffer.ReplayBuffer, "__init__", full)
    proc = run_patched("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: out of memory (Unable to allocate 37.3 GiB); the replay buffer holds "
        "--buffer_capacity=1,000,000 transitions for each of --num_seeds=1 seed(s): lower them "
        "or free memory; no checkpoint was written")


@pytest.mark.slow
def test_networks_too_large_for_memory_are_refused_before_anything_compiles(tmp_path):
    """The state's size, traced, against the device's memory: on a GPU XLA can compile such
    networks for over a minute before failing; here it takes no compilation."""
    for dry_run in ([], ["--dry_run"]):  # --dry_run checks it too
        proc = run("run_sac.py", *FAST_SAC, "--hidden_dim=100000000", "--num_seeds=2",
                   "--max_steps=300", "--start_steps=100", f"--logdir={tmp_path}", *dry_run,
                   check=False, timeout=60)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        expected = (r"error: out of memory: the agent's state \(parameters, target networks and "
                    r"optimizer moments\) of 2 seed\(s\) takes [\d,]+\.\d GiB, more than the "
                    r"(CPU|GPU)'s [\d,]+\.\d GiB; the networks' sizes and --num_seeds set it: "
                    r"lower them; no checkpoint was written")
        assert re.fullmatch(expected, last), last


@pytest.mark.slow
@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="on a GPU XLA can compile these networks for minutes before failing")
def test_an_allocation_that_fails_while_training_is_one_line_naming_what_sets_its_size(
        tmp_path, monkeypatch):
    """XLA's failed allocation (JaxRuntimeError) where the device's memory is not known, so the
    state's size is not checked first."""
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: None)
    proc = run_patched("run_sac.py", *FAST_SAC, "--hidden_dim=100000000", "--max_steps=300",
                       "--start_steps=100", f"--logdir={tmp_path}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert re.match(r"error: out of memory on the CPU \(", last), last
    assert last.endswith("the networks' sizes and --num_seeds x --utd x --batch_size "
                         "(1 x 1 x 256) set what an update holds: lower them; no checkpoint "
                         "was written")


@pytest.mark.slow
def test_the_state_size_check_counts_every_byte_and_refuses_only_past_the_memory(monkeypatch):
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(8, 8)))
    init_fn, keys = step_fns.seed_init(agent, range(3), 5, 2)
    state = init_fn(keys)
    assert resources.device_memory_bytes(jax.devices("cpu")[0]) > 2**28  # the host's memory
    need = sum(leaf.nbytes if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
               else jax.random.key_data(leaf).nbytes for leaf in jax.tree.leaves(state))
    assert resources.tree_nbytes(jax.eval_shape(init_fn, keys)) == need
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: need)
    resources.check_state_fits(init_fn, keys)
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: need - 1)
    with pytest.raises(resources.TooLargeForMemory, match=f"of 3 seed\\(s\\) takes {need:,} bytes, "
                       f"more than the CPU's {need - 1:,} bytes$"):  # no GiB tells them apart
        resources.check_state_fits(init_fn, keys)
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: None)  # unknown: no check
    resources.check_state_fits(init_fn, keys)


def test_the_seeds_keys_are_each_seeds_own_key_from_one_call():
    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(8, 8)))
    seeds = [0, 1, 2**31 - 1, 2**31, 2**32 - 1]
    _, keys = step_fns.seed_init(agent, seeds, 5, 2)
    expected = [jax.random.key_data(jax.random.key(s)) for s in seeds]
    assert jax.random.key_data(keys).tolist() == [k.tolist() for k in expected]


def test_the_memory_check_counts_buffer_envs_states_and_process_before_building_envs(
        monkeypatch):
    """The host's memory against the replay buffer's filled slots (computed here from its
    dtypes), two envs per seed (MuJoCo's model and data buffers), the states and the process."""
    from envs import make_env

    agent = make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(8, 8)))
    cfg = TrainConfig(env="cartpole-swingup", num_seeds=3, max_steps=5000,
                      buffer_capacity=100_000)
    env = make_env(cfg.env, 0)
    physics = env.env.physics
    init_fn, keys = step_fns.seed_init(agent, cfg.seeds, env.obs_dim, env.act_dim)
    states = resources.tree_nbytes(jax.eval_shape(init_fn, keys))
    slot = 5 * 4 + 1 * 4 + 4 + 1 + 1 + 4  # obs, action, reward, 2 flags, final ordinal
    need_envs = 2 * 3 * (physics.model.nbuffer + physics.data.nbuffer)
    need = 3 * 5000 * slot + need_envs + states + 2**28
    monkeypatch.setattr(resources, "process_memory_bytes", lambda: 2**28)
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: need)
    resources.check_fits(init_fn, keys, cfg, env)
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: need - 1)
    with pytest.raises(resources.TooLargeForMemory, match=(
            rf"the run needs about {need:,} bytes of host memory, more than the host's "
            rf"{need - 1:,} bytes: the replay buffer \(3 seed\(s\) x 5,000 transitions, the "
            rf"smaller of --buffer_capacity and --max_steps\) 1 MiB, 6 envs "
            rf"\(training and evaluation\) {round(need_envs / 2**20)} MiB, the agents' states "
            r"1 MiB, this process so far 256 MiB$")) as refused:
        resources.check_fits(init_fn, keys, cfg, env)
    assert refused.value.advice == "lower --num_seeds, --buffer_capacity or --max_steps"
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: None)  # not known
    resources.check_fits(init_fn, keys, cfg, env)


@pytest.mark.slow
def test_a_run_too_large_for_the_hosts_memory_is_refused_before_its_envs_are_built(
        tmp_path, monkeypatch):
    """1,000 seeds' envs alone are more than 2 GiB, the memory this run is given."""
    monkeypatch.setattr(resources, "device_memory_bytes", lambda device: 2**31)
    monkeypatch.setattr(train, "make_vector_env", None)  # building the envs would fail
    proc = run_patched("run_sac.py", *FAST_SAC, "--num_seeds=1000", "--buffer_capacity=1000",
                       "--eval_seed_offset=1000", f"--logdir={tmp_path}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: out of memory: the run needs about [\d.,]+ GiB of host memory, "
                        r"more than the host's 2.0 GiB: .*2,000 envs .*; lower "
                        r"--num_seeds, --buffer_capacity or --max_steps; no checkpoint was "
                        r"written", last), last


@pytest.mark.slow
def test_a_run_directory_whose_lock_cannot_be_opened_is_unwritable(tmp_path):
    run_dir = tmp_path / "sac" / "cartpole-swingup" / "none-utd1-seed0"
    (run_dir / ".lock").mkdir(parents=True)  # as a read-only directory would refuse it
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", check=False, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: cannot write to the run directory {run_dir}: Is a directory; choose a "
        "writable --logdir"]


@pytest.mark.slow
def test_logdir_holding_a_run_with_another_config(tmp_path):
    run_dir = tmp_path / "sac" / "cartpole-swingup" / "none-utd1-seed0"
    run_dir.mkdir(parents=True)
    other = TrainConfig(agent="sac", env="cartpole-swingup", eval_episodes=1, progress=False,
                        logdir=str(tmp_path), run_name="none-utd1-seed0", utd=4)
    agent = dataclasses.replace(SACConfig(), hidden_dims=(32, 32))
    (run_dir / "config.json").write_text(json.dumps(config_record(other, agent)))
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", check=False, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds a run with different settings" in lines[0]
    assert "(utd: 4 there, 1 now)" in lines[0]
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


def test_a_run_recorded_before_a_setting_existed_is_still_the_same_run(tmp_path):
    """config.json of a run started before a setting existed lacks it; resuming that run with
    the value it had (the default) is not 'different settings'."""
    cfg = TrainConfig(agent="sac", env="cartpole-swingup", progress=False, logdir=str(tmp_path))
    record = config_record(cfg, SACConfig())
    for key in ("clip_ns_steps", "dormant_taus", "srank_threshold", "diagnostics_batch_size",
                "eval_seed_offset"):
        del record[key]
    del record["agent_config"]["init_scale"]
    os.makedirs(cfg.run_dir)
    with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
        json.dump(record, f)
    assert resume_state(cfg, config_record(cfg, SACConfig())) == "fresh"
    changed = dataclasses.replace(cfg, clip_method="newton_schulz", clip_ns_steps=8)
    with pytest.raises(ConfigError, match="clip_ns_steps: 20 there, 8 now"):
        resume_state(changed, config_record(changed, SACConfig()))
    changed = dataclasses.replace(cfg, eval_seed_offset=7)
    with pytest.raises(ConfigError, match="eval_seed_offset: 42 there, 7 now"):
        resume_state(changed, config_record(changed, SACConfig()))
    # --diagnostics_batch_size=0 (recorded, or added) is the --batch_size, 256, given or not.
    same = dataclasses.replace(cfg, diagnostics_batch_size=256)
    assert resume_state(same, config_record(same, SACConfig())) == "fresh"
    changed = dataclasses.replace(cfg, diagnostics_batch_size=1024)
    with pytest.raises(ConfigError, match="diagnostics_batch_size: 256 there, 1024 now"):
        resume_state(changed, config_record(changed, SACConfig()))
    wider = dataclasses.replace(SACConfig(), hidden_dims=(64, 64))
    with pytest.raises(ConfigError, match=re.escape(
            "(agent_config.hidden_dims: [256, 256] there, [64, 64] now)")):
        resume_state(cfg, config_record(cfg, wider))


def test_results_without_config_json_are_not_resumed_or_overwritten(tmp_path):
    """A run directory that lost its config.json cannot say which settings its checkpoints
    and eval rows were trained with: resuming it under the flags given, or starting it over
    on top of its eval.csv, would mix or lose results. A header alone (a run stopped before
    writing config.json) is nothing to keep."""
    cfg = TrainConfig(agent="sac", env="cartpole-swingup", progress=False, logdir=str(tmp_path))
    record = config_record(cfg, SACConfig())
    os.makedirs(os.path.join(cfg.run_dir, "checkpoints", "300"))
    with pytest.raises(ConfigError, match=re.escape(
            f"{cfg.run_dir} holds checkpoints but no config.json, so its settings cannot be "
            "checked")):
        resume_state(cfg, record)
    os.rmdir(os.path.join(cfg.run_dir, "checkpoints", "300"))
    eval_csv = os.path.join(cfg.run_dir, "eval.csv")
    with open(eval_csv, "w") as f:
        f.write("env_step,seed,return,wall_time\n")
    assert resume_state(cfg, record) == "fresh"
    with open(eval_csv, "a") as f:
        f.write("100,0,12.5,3.0\n200,0,20.5,6.0\n")
    with pytest.raises(ConfigError, match=r"holds 2 eval.csv row\(s\) but no config.json"):
        resume_state(cfg, record)


@pytest.mark.slow
def test_resume_never_refuses_an_existing_run_and_must_needs_a_checkpoint(tmp_path):
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", "--resume=must", check=False,
               timeout=60)
    assert proc.returncode == 2 and "--resume=must but there is no checkpoint" in proc.stderr
    assert list(tmp_path.iterdir()) == [], "a refused run creates no directory"


BRO_CASES = [(["--utd=ten"], "flag --utd=ten"),
             (["--env=dog-rn"], "did you mean 'dog-run'?"),
             (["--critic_width=0"], "--critic_width must be positive"),
             (["--init_temperature=nan"], "--init_temperature must be a finite number"),
             (["--scalar_log_max=1000"], "--scalar_log_min and scalar_log_max must satisfy"),
             (["--kappa=0"], "--kappa must be positive, got 0.0")]


def test_a_cgroup_memory_limit_of_the_process_or_an_ancestor_bounds_the_cpu_memory(
        tmp_path, monkeypatch):
    """A container's or a SLURM job's limit (--mem): smaller than the machine's memory."""
    cpu = jax.devices("cpu")[0]
    monkeypatch.setattr(resources, "cgroup_memory_limit", lambda: 2**20)
    assert resources.device_memory_bytes(cpu) == 2**20
    monkeypatch.undo()
    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    write(v2 / "proc", "0::/job/step\n")
    write(v2 / "fs" / "memory.max", "max\n")
    write(v2 / "fs" / "job" / "memory.max", "4294967296\n")  # the job's, above its step
    write(v2 / "fs" / "job" / "step" / "memory.max", "max\n")
    assert resources.cgroup_memory_limit(str(v2 / "proc"), str(v2 / "fs")) == 2**32
    write(v1 / "proc", "5:cpu,cpuacct:/x\n4:memory:/slurm/job_7\n")
    write(v1 / "fs" / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    write(v1 / "fs" / "memory" / "slurm" / "job_7" / "memory.limit_in_bytes", "1073741824\n")
    assert resources.cgroup_memory_limit(str(v1 / "proc"), str(v1 / "fs")) == 2**30
    write(v1 / "none", "4:memory:/gone\n")  # no readable limit: none known
    assert resources.cgroup_memory_limit(str(v1 / "none"), str(tmp_path / "nothing")) is None
    assert resources.cgroup_memory_limit(str(tmp_path / "no-proc-file")) is None


def test_array_sizes_past_int32_are_refused_with_the_setting_named():
    """JAX's shape arithmetic is int32: past it, a traceback from deep inside the trace."""
    make_agent("sac", dataclasses.replace(SACConfig(), hidden_dims=(2**31 - 1,)))  # only sized
    for name in ("critic_width", "actor_width", "optimistic_width", "num_quantiles"):
        with pytest.raises(ValueError, match=f"^{name} must be at most 2\\*\\*31 - 1 "
                           r"\(2,147,483,647\), the largest array dimension, got 2,147,483,648$"):
            dataclasses.replace(BROConfig(), **{name: 2**31})
    for config in ({"num_critics": 2**31}, {"hidden_dims": (256, 2**31)}):
        with pytest.raises(ValueError, match="must be at most 2\\*\\*31 - 1"):
            dataclasses.replace(SACConfig(), **config)


@pytest.mark.slow
@pytest.mark.parametrize("args, expected", BRO_CASES)
def test_run_bro_bad_input_is_one_line_and_exit_2(args, expected, tmp_path):
    proc = run("run_bro.py", f"--logdir={tmp_path}/runs", *args, check=False, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("script, flag", [("run_sac.py", "--clip_ns_steps"),
                                          ("run_bro.py", "--init_scale"),
                                          ("aggregate.py", "--runs"), ("sweep.py", "--envs")])
def test_help_exits_0_and_lists_the_flags(script, flag):
    proc = run(script, "--help", timeout=60)  # check=True: exit code 0
    assert flag in proc.stdout


@pytest.mark.slow
def test_intervention_steps_past_the_run_are_warned_about(tmp_path):
    assert schedule_warning(TrainConfig(intervention="reset", intervention_steps=(100, 300),
                                        max_steps=300)) == (
        "--intervention=reset at env steps 300 never happens: they are at or after "
        "--max_steps=300, and a run intervenes only before its last step")
    assert schedule_warning(TrainConfig(intervention="reset", intervention_steps=(100,),
                                        max_steps=300)) is None
    assert schedule_warning(TrainConfig(intervention="clip", max_steps=100_000)) == (
        "--intervention=clip never happens: --intervention_every=200000 comes at or after "
        "--max_steps=100000, and a run intervenes only before its last step")
    assert "--intervention_every=200000 gradient steps comes at or after" in schedule_warning(
        TrainConfig(intervention="clip", max_steps=30_000, start_steps=1000, utd=4,
                    intervention_unit="grad_steps"))
    assert schedule_warning(TrainConfig(intervention="clip", max_steps=60_000, start_steps=1000,
                                        utd=4, intervention_unit="grad_steps")) is None
    assert schedule_warning(TrainConfig(intervention="none", max_steps=100_000)) is None
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", "--hidden_dim=8",
               "--max_steps=300", "--start_steps=100", "--eval_every=300",
               "--intervention=reset", "--intervention_steps=300", timeout=120)
    assert proc.stderr.startswith("warning: --intervention=reset at env steps 300 never happens")
    # BRO's reset steps by default: the first, 15001, is named when the run ends before it
    # (config_from_flags left no step of them); a schedule flag given is named instead.
    bro = TrainConfig(agent="bro", intervention="reset", max_steps=100, start_steps=50)
    assert schedule_warning(bro) == (
        "--intervention=reset never happens: BRO's reset steps (the first at env step 15001) "
        "are at or after --max_steps=100, and a run intervenes only before its last step")
    assert schedule_warning(bro, given=["intervention_every"]).startswith(
        "--intervention=reset never happens: --intervention_every=200000 comes at or after")
    redo = schedule_warning(dataclasses.replace(bro, intervention="redo"))  # a period of its own
    assert redo.startswith("--intervention=redo never happens: --intervention_every=")


def test_interventions_before_the_first_update_are_warned_about():
    assert early_warning(TrainConfig(intervention="reset")) is None  # 200,000 vs 10,000
    assert early_warning(TrainConfig(intervention="clip", intervention_every=2_000)) == (
        "--intervention=clip at env steps 2000,4000,6000,8000 comes before --start_steps=10000, "
        "the first update: it acts on networks not yet trained")
    assert early_warning(TrainConfig(intervention="reset", intervention_every=100)).startswith(
        "--intervention=reset at env steps 100,200,300,400,500,... comes before")
    assert early_warning(TrainConfig(intervention="reset", intervention_steps=(10_000,))) is None
    assert early_warning(TrainConfig(intervention_every=2_000)) is None  # no intervention


def test_flags_the_intervention_never_reads_are_warned_about():
    given = ["env", "clip_c", "clip_sides", "intervention_every", "utd"]
    assert unused_flags_warning(TrainConfig(intervention="clip"), given) is None
    reset = unused_flags_warning(TrainConfig(intervention="reset"), given)
    assert reset.startswith("--clip_c, --clip_sides are not read (")
    assert "--intervention=clip" in reset and "--intervention_every" not in reset
    none = unused_flags_warning(TrainConfig(intervention="none"), given)
    assert none.startswith("--clip_c, --clip_sides are not read")
    assert "--intervention_every is not read (--intervention=none has no scheduled event)" in none
    assert unused_flags_warning(TrainConfig(intervention="none"), ["clip_ns_steps"]).startswith(
        "--clip_ns_steps is not read")
    steps = TrainConfig(intervention="reset", intervention_steps=(150,))
    assert "--intervention_every is not read (--intervention_steps sets the schedule)" in \
        unused_flags_warning(steps, given)
    assert unused_flags_warning(TrainConfig(intervention="none"), ["env", "utd"]) is None


def test_train_envs_seeded_like_eval_envs_are_warned_about():
    assert seed_warning(TrainConfig(seed=5, num_seeds=42)) is None  # seeds 5..46, eval 47..88
    assert seed_warning(TrainConfig(seed=5, num_seeds=43)) == (
        "the eval env of seed 5 has dm_control seed 47, which the train env of seed 47 has too "
        "(--num_seeds=43 is above --eval_seed_offset=42), so their episodes start alike; "
        "--eval_seed_offset=43 or more keeps them apart")
    assert seed_warning(TrainConfig(num_seeds=1, eval_seed_offset=0)).startswith(
        "the eval env of seed 0 has dm_control seed 0, which the train env of seed 0 has too")


@pytest.mark.slow
def test_a_diagnostics_batch_no_buffer_of_the_run_holds_is_warned_about(tmp_path):
    assert diagnostics_warning(TrainConfig(max_steps=1000, start_steps=10)) is None
    assert diagnostics_warning(TrainConfig(max_steps=1000, start_steps=10,
                                           diagnostics_batch_size=1000)) is None
    assert diagnostics_warning(TrainConfig(max_steps=200, start_steps=10)) == (
        "the feature diagnostics need 256 transitions in the replay buffer (--batch_size, as "
        "--diagnostics_batch_size=0 asks), more than this run collects (200, --max_steps): "
        "diagnostics.csv will hold the weight spectra alone")
    assert diagnostics_warning(TrainConfig(max_steps=200, start_steps=10,
                                           diagnostics_batch_size=201)).startswith(
        "the feature diagnostics need 201 transitions in the replay buffer "
        "(--diagnostics_batch_size), more")
    # A run script shows it, with its other warnings, from --dry_run on.
    proc = run("run_sac.py", *FAST_SAC, "--max_steps=200", "--start_steps=10",
               "--diagnostics_batch_size=201", f"--logdir={tmp_path}/runs", "--dry_run",
               timeout=60)
    assert "warning: the feature diagnostics need 201 transitions" in proc.stderr
    assert diagnostics_warning(TrainConfig(max_steps=200, start_steps=10,
                                           diagnostics=False)) is None


@pytest.mark.slow
def test_a_run_directory_in_use_or_with_an_unreadable_config_is_refused(tmp_path):
    run_dir = tmp_path / "sac" / "cartpole-swingup" / "none-utd1-seed0"
    run_dir.mkdir(parents=True)
    with open(run_dir / ".lock", "a+") as held:  # as a process training this run holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 12345 on elsewhere\n")
        held.flush()
        proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", check=False, timeout=60)
    assert proc.returncode == 75  # EX_TEMPFAIL: a sweep relaunches the job later
    assert proc.stderr.strip().splitlines() == [
        f"error: {run_dir} is being trained by pid 12345 on elsewhere; wait for "
        "it to end or stop it first (if that process is gone, as with a node that crashed, "
        f"delete {run_dir / '.lock'})"]
    (run_dir / "config.json").write_text('{"env": "cartpole-sw')  # cut off by a crash
    proc = run("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", check=False, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot resume: {run_dir / 'config.json'} cannot be read (JSONDecodeError")


@pytest.mark.slow
def test_a_full_disk_while_training_is_one_line_and_exit_1(tmp_path, monkeypatch):
    """The checkpoint write fails as on a full disk: one line saying how to resume."""
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train.Trainer, "save", full)
    proc = run_patched("run_sac.py", *FAST_SAC, f"--logdir={tmp_path}", "--hidden_dim=8",
                       "--max_steps=300", "--start_steps=100", "--eval_every=300",
                       "--action_repeat=8")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: [Errno 28] No space left on device; no checkpoint of ")
    assert proc.stderr.strip().endswith("was complete, so the same command starts it over once "
                                        "that is fixed")


def test_a_filesystem_without_locks_warns_and_trains(tmp_path, monkeypatch, capsys):
    def no_locks(*args):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    handle = lock_run_dir(str(tmp_path))
    handle.close()
    assert capsys.readouterr().err.startswith(f"warning: cannot lock {tmp_path / '.lock'} (No "
                                              "locks available); a second launch")
