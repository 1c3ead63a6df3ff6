"""End-to-end training speed with each combination of --env_backend and --replay_on_device, as
ratios to the defaults (dm_control, replay in host memory) measured within one run.

    python benchmarks/loop_options.py                  # SAC, humanoid-stand, UTD 1, 1 and 4 seeds
    python benchmarks/loop_options.py --seeds=16 --utd=8 --chunk=20

For each seed count: a SAC trainer per combination, each past its 300 random steps and its
first updates (compiled); then --rounds rounds, each timing --chunk training iterations
(`Trainer.iteration`: env step, insert, update, next actions; no evaluation, diagnostics or
checkpoint falls in them) of every trainer in turn, the order turning by one each round, so
that the machine's drifting speed reaches them alike. Prints each combination's env steps/s
(median) and the median over rounds of its rate over the defaults' in the same round.
"""

import itertools
import tempfile
import time

import jax
import numpy as np
from absl import app, flags
from bench_utils import sac_trainer, xla_flags
from recording import record

flags.DEFINE_string("env", "humanoid-stand", "Task trained.")
flags.DEFINE_list("seeds", ["1", "4"], "Seed counts (each a set of trainers).")
flags.DEFINE_integer("utd", 1, "Update-to-data ratio.", lower_bound=1)
flags.DEFINE_integer("chunk", 100, "Training iterations per trainer and round.", lower_bound=1)
flags.DEFINE_integer("rounds", 5, "Rounds.", lower_bound=1)
FLAGS = flags.FLAGS

COMBINATIONS = list(itertools.product(("dm_control", "envpool"), (False, True)))


def label(backend: str, on_device: bool) -> str:
    return f"{backend}, replay on the {'device' if on_device else 'host'}"


def main(_):
    print(f"devices: {jax.devices()}; XLA_FLAGS: {xla_flags()}")
    rows = []
    for seeds in map(int, FLAGS.seeds):
        with tempfile.TemporaryDirectory() as logdir:
            runs = {}
            for backend, on_device in COMBINATIONS:
                trainer = sac_trainer(f"{logdir}/{backend}-{on_device}", FLAGS.env, FLAGS.utd,
                                      num_seeds=seeds, env_backend=backend,
                                      replay_on_device=on_device, eval_every=10**7,
                                      max_steps=10**7, checkpoint_every=10**7,
                                      diagnostics=False)
                loop = trainer.start()
                while loop.env_step < trainer.cfg.start_steps + 20:
                    trainer.iteration(loop, 0.0)
                jax.block_until_ready(loop.states)
                runs[(backend, on_device)] = (trainer, loop)
            rates = {key: [] for key in runs}
            for round_ in range(FLAGS.rounds):
                order = COMBINATIONS[round_ % 4:] + COMBINATIONS[:round_ % 4]
                for key in order:
                    trainer, loop = runs[key]
                    start = time.perf_counter()
                    for _ in range(FLAGS.chunk):
                        trainer.iteration(loop, 0.0)
                    jax.block_until_ready(loop.states)
                    rates[key].append(FLAGS.chunk / (time.perf_counter() - start))
            default = np.array(rates[("dm_control", False)])
            for key, values in rates.items():
                ratios = np.array(values) / default
                print(f"{FLAGS.env}, SAC UTD {FLAGS.utd}, {seeds} seed(s), {label(*key)}: "
                      f"{np.median(values):.1f} env steps/s ({seeds * np.median(values):.1f} "
                      f"seed-steps/s), {np.median(ratios):.2f}x the defaults (rounds "
                      f"{ratios.min():.2f}-{ratios.max():.2f})", flush=True)
                what = f"{FLAGS.env}, SAC UTD {FLAGS.utd}, {seeds} seed(s), {label(*key)}"
                median = f"median of {FLAGS.rounds} rounds"
                rows += [(f"{what} ({median})", np.median(values), "env steps/s"),
                         (f"{what} ({median})", seeds * np.median(values), "seed-steps/s"),
                         (f"{what}, over the defaults ({median})", np.median(ratios), "x"),
                         (f"{what}, over the defaults, lowest round", ratios.min(), "x"),
                         (f"{what}, over the defaults, highest round", ratios.max(), "x")]
    record("loop_options", rows)


if __name__ == "__main__":
    app.run(main)
