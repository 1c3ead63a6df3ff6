"""The critic ensemble's `tile_inputs` (networks/critics.py), on and off, for SAC and BRO.

    python benchmarks/ensemble_tiling.py                  # SAC and BRO, 1 and 4 seeds, 2 rounds
    python benchmarks/ensemble_tiling.py --agents=sac --seeds=4 --rounds=3

Times each agent's seed-vmapped, jitted update (SAC at UTD 8, batch 256; BRO at UTD 10,
batch 128; humanoid dimensions) with its critic ensemble's inputs tiled and not tiled, the two
alternating, and prints seed-updates/s of each and their ratio. The agents' own choice is
marked with *.
"""

import importlib

from absl import app, flags
from bench_utils import update_throughput, xla_flags
from recording import record

from agents import make_agent
from networks import Ensemble

flags.DEFINE_list("agents", ["sac", "bro"], "Agents to time.")
flags.DEFINE_list("seeds", ["1", "4"], "Seed counts.")
flags.DEFINE_integer("rounds", 2, "Times each setting is measured (alternating).")
FLAGS = flags.FLAGS

SHAPES = {"sac": {"utd": 8, "batch": 256}, "bro": {"utd": 10, "batch": 128}}
OWN_NETWORKS = {name: importlib.import_module(f"agents.{name}").networks for name in SHAPES}


def own_tiling(agent: str) -> bool:
    """The `tile_inputs` the agent's own critic ensemble uses."""
    nets = OWN_NETWORKS[agent](make_agent(agent).config, 1)
    return next(n for n in nets if isinstance(n, Ensemble)).tile_inputs


def use_tiling(agent: str, tile: bool) -> None:
    """Make `agents.<agent>.networks`, which the agent's init calls, build its critic ensemble
    with `tile_inputs=tile`."""
    def networks(config, act_dim):
        nets = OWN_NETWORKS[agent](config, act_dim)
        return tuple(n.clone(tile_inputs=tile) if isinstance(n, Ensemble) else n for n in nets)

    importlib.import_module(f"agents.{agent}").networks = networks


def main(_):
    unknown = sorted(set(FLAGS.agents) - set(SHAPES))
    if unknown:
        raise app.UsageError(f"--agents: unknown {unknown}; accepted: {sorted(SHAPES)}")
    print(f"XLA_FLAGS: {xla_flags()}")
    rows = []
    for name in FLAGS.agents:
        own = own_tiling(name)
        for seeds in map(int, FLAGS.seeds):
            rates = {True: [], False: []}
            for _ in range(FLAGS.rounds):
                for tile in (False, True):
                    use_tiling(name, tile)
                    speed = update_throughput(make_agent(name), 67, 21, seeds=seeds,
                                              **SHAPES[name])
                    rates[tile].append(speed.rate)
            shown = {t: ", ".join(f"{r:.1f}" for r in rates[t]) + ("*" if t == own else "")
                     for t in rates}
            print(f"{name}, {seeds} seed(s), seed-updates/s: not tiled {shown[False]}; tiled "
                  f"{shown[True]}; tiled / not tiled {max(rates[True]) / max(rates[False]):.3f} "
                  "(best of each)")
            what = f"{name} update, {seeds} seed(s), critic inputs"
            rows += [(f"{what} not tiled", max(rates[False]), "seed-updates/s"),
                     (f"{what} tiled", max(rates[True]), "seed-updates/s"),
                     (f"{what} tiled / not tiled", max(rates[True]) / max(rates[False]), "x")]
        importlib.import_module(f"agents.{name}").networks = OWN_NETWORKS[name]
    record("ensemble_tiling", rows)


if __name__ == "__main__":
    app.run(main)
