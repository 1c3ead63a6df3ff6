"""What the dashboards (`--log_to=tensorboard,wandb`) add to a default SAC run's time, as a
ratio measured within one run of this script.

    python benchmarks/logging_overhead.py                  # 4 rounds of 2,000 env steps each
    python benchmarks/logging_overhead.py --rounds=6 --steps=5000

Two trainers of SAC with its default settings (cheetah-run, 1 seed, UTD 1, 256-wide networks,
a train.csv row every 1,000 env steps) train in alternating blocks of --steps env steps, one
writing the CSV files alone and one also writing TensorBoard event files and an offline wandb
run (`--wandb_mode=offline`: the same records as online, without the upload; wandb's service
process lives through both trainers' blocks). Each block
evaluates as often per env step as the defaults do (one episode per 1,000 steps) and writes the
diagnostics once, at its last step: with the default --steps, 5 times as often as a default run
(every 10,000 steps), so the diagnostics' share of the logging is overstated. Both start with
300 random steps and a 100,000-transition buffer, and write no checkpoint inside the blocks.

Prints per round the two blocks' wall-clock seconds and this process's CPU seconds, and their
ratios (both move by several percent where other processes share the cores); their medians;
then what the dashboards cost directly, which such sharing moves far less: the time inside
their calls (rows, end of step) and the CPU time wandb's service process used during the
logged blocks beyond the plain ones, together as a share of the plain blocks' time; and the
one-off cost of creating, starting (wandb.init, the event files) and closing the dashboards,
against the time a default 1,000,000-step run takes at the measured rate.
"""

import os
import statistics
import tempfile
import time

import jax
from absl import app, flags
from bench_utils import sac_trainer, xla_flags
from recording import record

from experiment import dashboards

flags.DEFINE_integer("steps", 2000, "Env steps per block (a multiple of 1,000).")
flags.DEFINE_integer("rounds", 4, "Rounds of one block without and one with the dashboards "
                     "(the plain one first in odd rounds, second in even ones).")
FLAGS = flags.FLAGS
DEFAULT_RUN_STEPS = 1_000_000


def timed_calls(totals: dict) -> None:
    """Add the seconds spent in the dashboards' methods to totals: "inside" for those a run
    calls as it trains, "once" for creating, starting and closing them."""
    for name, total in (("rows", "inside"), ("end_step", "inside"), ("__init__", "once"),
                        ("open", "once"), ("close", "once")):
        method = getattr(dashboards.Dashboards, name)

        def wrapper(self, *args, _method=method, _total=total, **kwargs):
            start = time.perf_counter()
            try:
                return _method(self, *args, **kwargs)
            finally:
                totals[_total] += time.perf_counter() - start

        setattr(dashboards.Dashboards, name, wrapper)


def children_cpu_seconds() -> float:
    """CPU seconds used so far by this process's child processes that are still running
    (wandb's service), from /proc."""
    total, me, tick = 0.0, str(os.getpid()), os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # the parent's pid; utime and stime follow 11 fields later
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def block(trainer, loop, started: float, steps: int) -> dict[str, float]:
    """Seconds of `steps` training iterations, the last one's computation waited for: "wall"
    clock, this process's "cpu" (all its threads), its child processes' ("service": wandb's)."""
    wall, cpu, service = time.perf_counter(), time.process_time(), children_cpu_seconds()
    for _ in range(steps):
        trainer.iteration(loop, started)
    jax.block_until_ready(loop.states)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
            "service": children_cpu_seconds() - service}


def pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.2f} %"


def main(_):
    steps = FLAGS.steps
    if steps % 1000:
        raise app.UsageError("--steps must be a multiple of 1,000 (train.csv's interval)")
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    totals = {"inside": 0.0, "once": 0.0}
    timed_calls(totals)
    settings = dict(max_steps=10**8, eval_every=steps, eval_episodes=steps // 1000,
                    checkpoint_every=10**8)
    with tempfile.TemporaryDirectory() as logdir:
        plain = sac_trainer(logdir, "cheetah-run", 1, run_name="plain", **settings)
        logged = sac_trainer(logdir, "cheetah-run", 1, run_name="logged",
                             log_to=("tensorboard", "wandb"), wandb_mode="offline", **settings)
        plain_loop, logged_loop = plain.start(), logged.start()
        started = time.time()
        warm = 2 * steps  # compilations, the random steps, a first evaluation each
        block(plain, plain_loop, started, warm)
        block(logged, logged_loop, started, warm)
        totals["inside"] = 0.0
        ratios = {"wall": [], "cpu": []}
        seconds = {(kind, arm): 0.0 for kind in ("wall", "cpu", "service")
                   for arm in ("plain", "logged")}
        for r in range(FLAGS.rounds):
            if r % 2 == 0:  # which one goes first alternates, so an effect of the order cancels
                without = block(plain, plain_loop, started, steps)
                with_ = block(logged, logged_loop, started, steps)
            else:
                with_ = block(logged, logged_loop, started, steps)
                without = block(plain, plain_loop, started, steps)
            for kind in without:
                seconds[kind, "plain"] += without[kind]
                seconds[kind, "logged"] += with_[kind]
            for kind in ratios:
                ratios[kind].append(with_[kind] / without[kind])
            print(f"round {r + 1}: {steps} env steps in {without['wall']:.2f} s without the "
                  f"dashboards, {with_['wall']:.2f} s with them ({pct(ratios['wall'][-1])}); "
                  f"this process's CPU {without['cpu']:.2f} s and {with_['cpu']:.2f} s "
                  f"({pct(ratios['cpu'][-1])}); wandb's service {without['service']:.3f} s "
                  f"and {with_['service']:.3f} s")
        plain.files.close()
        logged.files.close()

    for kind, name in (("wall", "wall-clock time"), ("cpu", "this process's CPU time")):
        values = ratios[kind]
        print(f"{name}: median {pct(statistics.median(values))} (rounds {pct(min(values))} to "
              f"{pct(max(values))}); all rounds together "
              f"{pct(seconds[kind, 'logged'] / seconds[kind, 'plain'])}")
    inside, plain_wall = totals["inside"], seconds["wall", "plain"]
    service = seconds["service", "logged"] - seconds["service", "plain"]
    thousands = FLAGS.rounds * steps / 1000
    share = 100 * (inside + service) / plain_wall
    print(f"inside the dashboards' calls: {1e3 * inside / thousands:.2f} ms per 1,000 env steps; "
          f"wandb's service: {1e3 * service / thousands:.2f} ms of CPU per 1,000 env steps more "
          f"than while the other trainer trains; together {share:.3f} % of the time without "
          "the dashboards")
    per_step = seconds["wall", "plain"] / (FLAGS.rounds * steps)
    run_seconds = per_step * DEFAULT_RUN_STEPS
    once = totals["once"]
    print(f"creating, starting and closing the dashboards: {once:.2f} s, "
          f"{100 * once / run_seconds:.4f} % of a default {DEFAULT_RUN_STEPS:,}-step run at "
          f"this rate ({run_seconds / 3600:.1f} h)")
    record("logging_overhead", [
        ("wall_ratio_median", statistics.median(ratios["wall"]), "x"),
        ("cpu_ratio_median", statistics.median(ratios["cpu"]), "x"),
        ("inside_calls_per_1000_steps", 1e3 * inside / thousands, "ms"),
        ("wandb_service_per_1000_steps", 1e3 * service / thousands, "ms"),
        ("accounted_share", share, "%"),
        ("start_and_close", once, "s"),
    ])


if __name__ == "__main__":
    app.run(main)
