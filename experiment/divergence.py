"""The RL training loop's checks for a broken run (Trainer's DivergenceChecks): a loss past
LOSS_LIMIT is warned about and recorded, NaN or inf in a loss, the parameters or the actions
stops the run (Diverged)."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from experiment import protocol
from experiment.loop_checkpoint import Loop
from experiment.rundir.files import LOSS_WARNINGS
from experiment.rundir.record import write_json


class Diverged(protocol.Diverged):
    """NaN or inf in a loss, the parameters or the actions of `seed` at `env_step`."""

    def __init__(self, what: str, env_step: int, seed: int):
        super().__init__(f"{what} at env step {env_step} for seed {seed}")
        self.what, self.env_step, self.seed = what, env_step, seed
        self.resumed_from: int | None = None  # the checkpoint's env step, if none came since


# A finite loss whose magnitude passes this is warned about and recorded: DMC's rewards are at
# most 1 per control step, so with the discount 0.99 a return is at most 100 x the action
# repeat, and a squared TD error at most (200 x the action repeat)**2, 4e4 at action repeat 1.
# A loss past 1e10 is far past any bound the tasks set: it grows without one.
LOSS_LIMIT = 1e10


@jax.jit
def finite_per_seed(tree):
    """For each leaf (seeds, ...), whether each seed's values are all finite: (seeds,) bools."""
    return jax.tree.map(lambda x: jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1), tree)


class DivergenceChecks:
    """`Trainer`'s checks for a broken run, on its `cfg`, `agent`, `loss_warnings`,
    and `metric_means`."""

    def check_losses(self, env_step: int, means: dict[str, np.ndarray]) -> None:
        """Warn once per loss whose finite mean passes LOSS_LIMIT in magnitude (a loss that
        grows without bound: the run is most likely broken, though not yet NaN), and record
        its first crossing (env step, seed, value) in the run directory's LOSS_WARNINGS."""
        for name, values in sorted(means.items()):
            if not name.endswith("loss") or name in self.loss_warnings:
                continue
            past = np.flatnonzero(np.isfinite(values) & (np.abs(values) > LOSS_LIMIT))
            if not past.size:
                continue
            seed, value = self.cfg.seeds[past[0]], float(values[past[0]])
            self.loss_warnings[name] = {"env_step": env_step, "seed": seed, "value": value}
            self.write_loss_warnings()
            tqdm.write(f"warning: {name} of seed {seed} is {value:.3g} at env step {env_step}, "
                       f"past {LOSS_LIMIT:.0e}: a loss that grows without bound usually means "
                       "a broken run; recorded in "
                       f"{os.path.join(self.cfg.run_dir, LOSS_WARNINGS)}", file=sys.stderr)

    def write_loss_warnings(self) -> None:
        """LOSS_WARNINGS as `loss_warnings` has it (removed where it is empty)."""
        path = os.path.join(self.cfg.run_dir, LOSS_WARNINGS)
        if self.loss_warnings:
            write_json(path, {"limit": LOSS_LIMIT, "losses": self.loss_warnings}, indent=2)
        elif os.path.exists(path):
            os.remove(path)

    def check_divergence(self, loop: Loop) -> None:
        """Raise Diverged naming the first loss or parameter with a NaN or inf, and its seed."""
        for name, values in sorted(self.metric_means(loop).items()):
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                raise Diverged(f"{name} is {values[bad[0]]}", loop.env_step,
                               self.cfg.seeds[bad[0]])
        finite = jax.device_get(finite_per_seed(self.agent.weights(loop.states)))
        for path, ok in jax.tree_util.tree_flatten_with_path(finite)[0]:
            if not ok.all():
                seed = self.cfg.seeds[int(np.flatnonzero(~ok)[0])]
                name = jax.tree_util.keystr(path, simple=True, separator="/")
                raise Diverged(f"parameter {name} has NaN or inf", loop.env_step, seed)
        bad = np.flatnonzero(~np.isfinite(loop.actions).all(axis=1))
        if bad.size:
            raise Diverged("actions are not finite", loop.env_step, self.cfg.seeds[bad[0]])
