"""L2 Init (Kumar et al. 2023, "Maintaining plasticity in continual learning via regenerative
regularization"): a loss term pulling the parameters towards their values at initialisation,

    (lambda / 2) * ||theta - theta_0||^2,

with the 1/2 of the official code (skumar9876/L2_Init agents/agents.py, `L2InitAgent`), so that
its gradient is lambda * (theta - theta_0) and the paper's lambda values mean what they meant
there. As there, theta is every kernel and bias; normalization layers' parameters are left out.
theta_0 (the per-step state) is the part as the learner initialised it, or as a reset left it.
"""

import dataclasses

import jax
import jax.numpy as jnp

from interventions import layer_roles
from interventions.registry import Method, Settings, parts_setting, setting


@dataclasses.dataclass(frozen=True)
class L2InitConfig(Settings):
    coef: float = setting(1e-3, "Regularization strength lambda of (lambda / 2) * "
                          "||theta - theta_0||^2.")
    parts: tuple[str, ...] = parts_setting("L2 Init")

    def check(self):
        self.positive("coef")


def _regularized(params) -> list[int]:
    """The leaves pulled towards their initial values: all but normalization parameters."""
    return [i for i, path in enumerate(layer_roles.flatten(params).paths)
            if not layer_roles.is_norm(path[:-1])]


def init(params, cfg: L2InitConfig) -> tuple:
    """theta_0: a copy of the regularized leaves."""
    leaves = jax.tree.leaves(params)
    return tuple(leaves[i] for i in _regularized(params))


def penalty(params, aux: tuple, cfg: L2InitConfig) -> jax.Array:
    leaves = jax.tree.leaves(params)
    total = jnp.zeros((), jnp.float32)
    for i, theta_0 in zip(_regularized(params), aux, strict=True):
        total = total + jnp.sum(jnp.square(leaves[i] - theta_0))
    return 0.5 * cfg.coef * total


METHOD = Method(
    name="l2_init",
    kind="loss",
    config=L2InitConfig,
    summary="L2 Init: (lambda / 2) * ||theta - theta_0||^2 towards the initial parameters "
            "(Kumar et al. 2023).",
    default_parts="train_parts",
    init=init,
    penalty=penalty,
)
