"""Print a digest of each program a SAC run compiles for every registered method (the hooked
update, the diagnostics, the method's event), as lowered for XLA:

    PYTHONHASHSEED=1 python tests/helpers/compiled_programs.py

The digests must not change with PYTHONHASHSEED: JAX's persistent compilation cache is keyed on
the program, so one that a set's (hash-seeded) order shapes compiles again in every new process,
each launch and resume of a run.
"""

import dataclasses
import hashlib
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from agents.sac import SACConfig  # noqa: E402
from experiment import diagnose as diag  # noqa: E402
from experiment.events import build_intervention  # noqa: E402
from experiment.step_fns import seed_init, seeds_update  # noqa: E402
from interventions import registry  # noqa: E402
from interventions.plan import NO_HOOKS  # noqa: E402
from learners.batch import Batch  # noqa: E402
from tests.helpers.plans import ACT, OBS, hooked  # noqa: E402

SEEDS, UTD, BATCH = (0, 1), 2, 8
# Two hidden matrices of 128 x 128 a network: large enough for the programs that the events and
# the diagnostics share (interventions.diagnostics.shared_layers). Lowered only, never run.
CONFIG = dataclasses.replace(SACConfig(), hidden_dims=(128, 128, 128))


def zeros(tree):
    """Zeros shaped as `tree`'s leaves (keys made of zeros): a program is lowered for their
    shapes, not their values."""
    def leaf(s):
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(np.zeros((*s.shape, 2), np.uint32))
        return np.zeros(s.shape, s.dtype)

    return jax.tree.map(leaf, tree)


def batches(leading: int, size: int) -> Batch:
    """A (seeds, leading, size, ...) stack of transitions."""
    lead = (len(SEEDS), leading, size)
    return Batch(*(np.zeros(lead + tail, np.float32)
                   for tail in [(OBS,), (ACT,), (), (OBS,), ()]))


def digest(lowered) -> str:
    return hashlib.sha256(lowered.as_text().encode()).hexdigest()[:16]


for name in registry.names():
    settings = {} if registry.event_of(name) is None else {"intervention_every": 100}
    agent, plan, cfg = hooked("sac", name, CONFIG, num_seeds=len(SEEDS), **settings)
    init_fn, keys = seed_init(agent, SEEDS, OBS, ACT)
    states = zeros(jax.eval_shape(init_fn, keys))
    if name == "none" or plan.hooks is not NO_HOOKS:  # otherwise the update of "none"
        print(name, "update", digest(seeds_update(agent).lower(states, batches(UTD, BATCH))))
        batch = jax.tree.map(lambda x: x[:, 0], batches(1, BATCH))
        print(name, "diagnostics", digest(diag.make_diagnostics(agent).lower(states, batch)))
    if plan.event is not None:
        event = build_intervention(agent, cfg, plan, init_fn, keys,
                                   lambda step, n, size: batches(n, size))
        print(name, "event", digest(event.apply.lower(states, 100)))
