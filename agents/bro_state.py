"""BRO's settings and state: its hyperparameters (BROConfig, checked) and reset schedule, and the
BROState pytree the functions of agents/bro.py act on, with its bounded learned scalars."""

import dataclasses
import math

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from agents.common import FLOAT32_LOG_RANGE, check_ranges

FLOAT32_TINY = float(jnp.finfo(jnp.float32).tiny)
# BRO's resets (the BRO reference, bro_learner.py reset_list), in env steps; BRO Fast (UTD 2)
# resets only at the first (docs/algorithms.md, "Reset").
RESET_STEPS = (15001, 50001, 250001, 500001, 750001, 1000001, 1500001, 2000001)
FAST_UTD = 2


def reset_steps(max_steps: int, utd: int) -> tuple[int, ...]:
    """BRO's reset steps below max_steps; BRO Fast (UTD 2) resets only at the first one."""
    for name, value in (("max_steps", max_steps), ("utd", utd)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    steps = RESET_STEPS[:1] if utd == FAST_UTD else RESET_STEPS
    return tuple(s for s in steps if s < max_steps)


@dataclasses.dataclass(frozen=True)
class BROConfig:
    """BRO hyperparameters; defaults as in docs/algorithms.md.

    AdamW decays every parameter (biases and LayerNorm too), as optax.adamw does without a mask
    and as the BRO reference does.
    """

    critic_width: int = 512
    critic_depth: int = 2
    num_quantiles: int = 100
    kappa: float = 1.0  # quantile Huber threshold
    actor_width: int = 256
    actor_depth: int = 1
    optimistic_width: int = 256
    optimistic_depth: int = 1
    std_multiplier: float = 0.75  # std_o = std_multiplier * std_c
    shift_init_scale: float = 0.01
    init_scale: float = math.sqrt(2.0)  # orthogonal init of every other kernel but the log-std head
    actor_lr: float = 3e-4
    optimistic_lr: float = 3e-4
    critic_lr: float = 3e-4
    weight_decay: float = 1e-4
    temp_lr: float = 3e-4
    temp_b1: float = 0.5
    scalar_lr: float = 3e-5  # beta_opt and lambda_KL
    scalar_b1: float = 0.5
    init_optimism: float = 1.0
    init_kl_weight: float = 0.25
    target_kl: float = 0.05  # per action dimension
    pessimism: float = 0.0  # beta_pess
    discount: float = 0.99
    tau: float = 0.005
    init_temperature: float = 1.0
    target_entropy_scale: float = 0.5  # target entropy = -scale * |A|
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    scalar_log_min: float = -10.0  # beta_opt, lambda_KL live in [e^min, e^max]
    scalar_log_max: float = 7.5
    batch_size: int = 128
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm: forward-mode autodiff works

    def __post_init__(self):
        """A setting that cannot train is a ValueError naming it, as SACConfig's are."""
        check_ranges(self, positive=("critic_width", "actor_width", "optimistic_width",
                                     "num_quantiles", "init_scale", "batch_size", "kappa",
                                     "std_multiplier", "actor_lr", "optimistic_lr", "critic_lr",
                                     "temp_lr", "scalar_lr", "init_temperature"),
                     unit_b1=("temp_b1", "scalar_b1"),
                     non_negative=("weight_decay", "pessimism", "shift_init_scale"))
        if not self.target_kl > 0:  # the KL is >= 0: at 0, optimism would only ever shrink
            raise ValueError(f"target_kl must be positive (the KL per action dimension that "
                             f"the optimism scalars steer to), got {self.target_kl}")
        if self.kappa < FLOAT32_TINY:  # the quantile Huber loss divides by it
            raise ValueError(f"kappa must be at least {FLOAT32_TINY:.3g}, the smallest normal "
                             f"float32 (the loss divides by it), got {self.kappa}")
        for name in ("actor_lr", "optimistic_lr", "critic_lr"):  # AdamW: w -= lr * wd * w
            if getattr(self, name) * self.weight_decay >= 1:
                raise ValueError(f"weight_decay x {name} must be below 1 (AdamW multiplies "
                                 f"every weight by 1 - lr x weight_decay each step), got "
                                 f"{self.weight_decay} x {getattr(self, name)}")
        for name in ("critic_depth", "actor_depth", "optimistic_depth"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not -FLOAT32_LOG_RANGE <= self.scalar_log_min < self.scalar_log_max \
                <= FLOAT32_LOG_RANGE:
            raise ValueError(f"scalar_log_min and scalar_log_max must satisfy -{FLOAT32_LOG_RANGE}"
                             f" <= min < max <= {FLOAT32_LOG_RANGE} (exp of them is a float32), "
                             f"got {self.scalar_log_min} and {self.scalar_log_max}")
        for name in ("init_optimism", "init_kl_weight"):
            value = getattr(self, name)
            if not (value > 0 and self.scalar_log_min < math.log(value) < self.scalar_log_max):
                raise ValueError(
                    f"{name} must lie strictly inside (e^{self.scalar_log_min}, "
                    f"e^{self.scalar_log_max}), got {value}"
                )


class BoundedScalar(nn.Module):
    """A learned scalar exp(l) with l = lo + (hi - lo) (1 + tanh(p)) / 2, so it stays in
    [e^lo, e^hi]; p starts where the value is `init_value` (the BRO reference's parametrisation)."""

    init_value: float
    log_min: float = -10.0
    log_max: float = 7.5

    @nn.compact
    def __call__(self) -> jax.Array:
        half = 0.5 * (self.log_max - self.log_min)
        raw_init = math.atanh((math.log(self.init_value) - self.log_min) / half - 1.0)
        raw = self.param("raw", nn.initializers.constant(raw_init), ())
        return jnp.exp(self.log_min + half * (1.0 + jnp.tanh(raw)))


@flax.struct.dataclass
class BROState:
    actor: TrainState
    optimistic_actor: TrainState
    critic: TrainState
    target_critic_params: flax.core.FrozenDict
    temp: TrainState
    optimism: TrainState
    kl_weight: TrainState
    rng: jax.Array
    step: jax.Array
    target_entropy: jax.Array
    plasticity: dict = dataclasses.field(default_factory=dict)  # per-step interventions' state
