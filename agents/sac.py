"""Soft Actor-Critic (Haarnoja et al.) as in Nikishin et al. 2022, with LayerNorm MLPs.

Pure functions over one `SACState` pytree. `update` consumes a `(utd, batch, ...)` stack of
minibatches with `lax.scan`, so the whole update-to-data loop is one compiled call; the
trainer vmaps it over the seed axis.
"""

import dataclasses
import functools
import math

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from agents.common import (
    Temperature,
    check_ranges,
    check_size,
    polyak,
    sow_features,
)
from learners.batch import Batch
from learners.hooks import after_step, penalized, with_penalty
from learners.train_state import shared, train_state
from networks import Critic, Ensemble, TanhGaussianPolicy, tanh_gaussian_sample

RESET_EVERY = 200_000  # env steps between SAC's resets (Nikishin et al. 2022)


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC hyperparameters; defaults as in docs/algorithms.md."""

    hidden_dims: tuple[int, ...] = (256, 256)
    layer_norm: bool = True
    init_scale: float = math.sqrt(2.0)  # orthogonal init scale of every kernel
    num_critics: int = 2
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temp_lr: float = 3e-4
    discount: float = 0.99
    tau: float = 0.005
    init_temperature: float = 1.0
    target_entropy_scale: float = 0.5  # target entropy = -scale * |A|
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    batch_size: int = 256
    flax_layers: bool = False  # flax.linen's Dense and LayerNorm: forward-mode autodiff works

    def __post_init__(self):
        """A setting that cannot train is a ValueError naming it (the run scripts turn it into
        one error line before anything is built)."""
        if not self.hidden_dims or any(w <= 0 for w in self.hidden_dims):
            raise ValueError(f"hidden_dims must be positive widths, got {self.hidden_dims}")
        for width in self.hidden_dims:
            check_size("hidden_dims", width)
        check_ranges(self, positive=("num_critics", "batch_size", "actor_lr", "critic_lr",
                                     "temp_lr", "init_temperature", "init_scale"))


@flax.struct.dataclass
class SACState:
    actor: TrainState
    critic: TrainState
    target_critic_params: flax.core.FrozenDict
    temp: TrainState
    rng: jax.Array
    step: jax.Array
    target_entropy: jax.Array
    plasticity: dict = dataclasses.field(default_factory=dict)  # per-step interventions' state


def networks(config: SACConfig, act_dim: int) -> tuple[nn.Module, nn.Module]:
    """The actor and the critic ensemble of this config."""
    actor = TanhGaussianPolicy(config.hidden_dims, act_dim, config.log_std_min,
                               config.log_std_max, config.layer_norm, config.init_scale,
                               config.flax_layers)
    critic = Ensemble(Critic(config.hidden_dims, layer_norm=config.layer_norm,
                             init_scale=config.init_scale, flax_layers=config.flax_layers),
                      config.num_critics, tile_inputs=True)
    return actor, critic


def init(key: jax.Array, obs_dim: int, act_dim: int, config: SACConfig) -> SACState:
    """Fresh agent state; every network initialised from `key`."""
    actor_net, critic_net = shared(networks, config, act_dim)
    k_actor, k_critic, k_rng = jax.random.split(key, 3)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, act_dim))
    actor = train_state(actor_net.apply, actor_net.init(k_actor, obs)["params"],
                        shared(optax.adam, config.actor_lr))
    critic_params = critic_net.init(k_critic, obs, act)["params"]
    critic = train_state(critic_net.apply, critic_params, shared(optax.adam, config.critic_lr))
    temp_net = shared(Temperature, config.init_temperature)
    temp = train_state(temp_net.apply, temp_net.init(k_rng)["params"],
                       shared(optax.adam, config.temp_lr))
    return SACState(
        actor=actor,
        critic=critic,
        target_critic_params=critic_params,
        temp=temp,
        rng=k_rng,
        step=jnp.zeros((), jnp.int32),
        target_entropy=jnp.asarray(-config.target_entropy_scale * act_dim, jnp.float32),
    )


def acting(state: SACState) -> SACState:
    """The state with only what `act` reads (the actor's parameters); the rest is None."""
    return SACState(actor=state.actor.replace(step=None, opt_state=None), critic=None,
                    target_critic_params=None, temp=None, rng=None, step=None,
                    target_entropy=None, plasticity=None)


def act(state: SACState, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
    """Actions in [-1, 1] for `obs (..., obs_dim)`; tanh(mean) when deterministic."""
    mean, log_std = state.actor.apply_fn({"params": state.actor.params}, obs)
    if deterministic:
        return jnp.tanh(mean)
    return tanh_gaussian_sample(key, mean, log_std)[0]


def _sample_policy(actor: TrainState, params, obs: jax.Array, key: jax.Array):
    mean, log_std = actor.apply_fn({"params": params}, obs)
    return tanh_gaussian_sample(key, mean, log_std)


def critic_loss(state: SACState, batch: Batch, key: jax.Array, config: SACConfig):
    """`params -> (TD loss of both critics, mean Q)` on `batch`, the targets fixed."""
    next_actions, next_log_probs = _sample_policy(
        state.actor, state.actor.params, batch.next_observations, key
    )
    next_q = state.critic.apply_fn(
        {"params": state.target_critic_params}, batch.next_observations, next_actions
    ).min(axis=0)
    temperature = state.temp.apply_fn({"params": state.temp.params})
    next_v = next_q - temperature * next_log_probs
    target_q = batch.rewards + config.discount * batch.masks * next_v

    def loss_fn(params):
        q = state.critic.apply_fn({"params": params}, batch.observations, batch.actions)
        loss = ((q - target_q) ** 2).mean(axis=1).sum()
        return loss, q.mean()

    return loss_fn


def update_critic(state: SACState, batch: Batch, key: jax.Array, config: SACConfig, hooks=None):
    loss_fn = penalized(critic_loss(state, batch, key, config), hooks, "critic.params",
                        state.plasticity)
    (_, (q, loss, penalty)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.critic.params)
    critic = state.critic.apply_gradients(grads=grads)
    return state.replace(critic=critic), with_penalty({"critic_loss": loss, "q": q}, "critic",
                                                      penalty)


def actor_loss(state: SACState, batch: Batch, key: jax.Array):
    """`params -> (actor loss, entropy estimate)` on `batch`, critics and temperature fixed."""
    temperature = state.temp.apply_fn({"params": state.temp.params})

    def loss_fn(params):
        actions, log_probs = _sample_policy(state.actor, params, batch.observations, key)
        q = state.critic.apply_fn(
            {"params": state.critic.params}, batch.observations, actions
        ).min(axis=0)
        return (temperature * log_probs - q).mean(), -log_probs.mean()

    return loss_fn


def update_actor(state: SACState, batch: Batch, key: jax.Array, hooks=None):
    loss_fn = penalized(actor_loss(state, batch, key), hooks, "actor.params", state.plasticity)
    (_, (entropy, loss, penalty)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.actor.params)
    actor = state.actor.apply_gradients(grads=grads)
    return state.replace(actor=actor), with_penalty({"actor_loss": loss, "entropy": entropy},
                                                    "actor", penalty)


def update_temperature(state: SACState, entropy: jax.Array):
    def loss_fn(params):
        temperature = state.temp.apply_fn({"params": params})
        return temperature * (entropy - state.target_entropy)

    loss, grads = jax.value_and_grad(loss_fn)(state.temp.params)
    temp = state.temp.apply_gradients(grads=grads)
    new_temperature = temp.apply_fn({"params": temp.params})
    return state.replace(temp=temp), {"temp_loss": loss, "temperature": new_temperature}


def update_step(state: SACState, batch: Batch, config: SACConfig, hooks=None):
    """One gradient step on each of critic, target, actor and temperature, then the
    interventions' per-step hooks (`hooks`: interventions.Hooks, or None)."""
    rng, k_critic, k_actor = jax.random.split(state.rng, 3)
    state, critic_info = update_critic(state, batch, k_critic, config, hooks)
    state = state.replace(
        target_critic_params=polyak(state.critic.params, state.target_critic_params, config.tau)
    )
    state, actor_info = update_actor(state, batch, k_actor, hooks)
    state, temp_info = update_temperature(state, actor_info["entropy"])
    state = state.replace(rng=rng, step=state.step + 1)
    return after_step(state, hooks), {**critic_info, **actor_info, **temp_info}


def update(state: SACState, batches: Batch, config: SACConfig, hooks=None):
    """`batches` leaves are `(utd, batch, ...)`; one scan over the utd axis. Metrics are means."""
    step = functools.partial(update_step, config=config, hooks=hooks)
    state, infos = jax.lax.scan(step, state, batches)
    return state, jax.tree.map(jnp.mean, infos)


def loss_grads(state: SACState, batch: Batch, key: jax.Array, config: SACConfig) -> dict:
    """Gradients of the critic's and the actor's losses on `batch` (no penalties), keyed by
    the state path of the parameters they are taken with respect to."""
    k_critic, k_actor = jax.random.split(key)
    critic = jax.grad(lambda p: critic_loss(state, batch, k_critic, config)(p)[0])
    actor = jax.grad(lambda p: actor_loss(state, batch, k_actor)(p)[0])
    return {"critic.params": critic(state.critic.params),
            "actor.params": actor(state.actor.params)}


def features(state: SACState, batch: Batch) -> dict[str, dict[str, jax.Array]]:
    """Hidden-layer features `(..., batch, units)` of actor and critic on `batch`."""
    actor_feats = sow_features(
        state.actor.apply_fn, state.actor.params, batch.observations
    )
    critic_feats = sow_features(
        state.critic.apply_fn, state.critic.params, batch.observations, batch.actions
    )
    return {"actor": actor_feats, "critic": critic_feats}


def weights(state: SACState) -> dict[str, flax.core.FrozenDict]:
    """The parameter trees whose weight matrices the diagnostics report."""
    return {
        "actor": state.actor.params,
        "critic": state.critic.params,
        "target_critic": state.target_critic_params,
    }
