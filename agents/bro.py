"""BRO, "Bigger, Regularized, Optimistic" (Nauman et al. 2024), as docs/algorithms.md describes it.

Two BroNet quantile critics, a conservative actor trained as in SAC, and an optimistic actor
that collects the data: a learned shift of the conservative mean, a narrower std, trained on an
upper bound of Q with a KL penalty towards the conservative policy. The optimism beta_opt and the
KL weight lambda_KL are learned so that the KL per action dimension tracks `target_kl`.

Pure functions over one `BROState` pytree (it and `BROConfig` are in agents/bro_state.py);
`update` scans over the `(utd, batch, ...)` axis. Where algorithms.md is silent this follows the
public BRO reference implementation (see the notes on `BoundedScalar` and `BROConfig` in
agents/bro_state.py, `BroActor` and `update_optimistic_actor`).
"""

import functools
import math

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from agents.bro_state import BoundedScalar, BROConfig, BROState
from agents.common import Temperature, polyak, sow_features
from learners.batch import Batch
from learners.hooks import after_step, penalized, with_penalty
from learners.train_state import shared, train_state
from networks import BroActor, Ensemble, OptimisticActor, QuantileCritic, tanh_gaussian_sample

NUM_CRITICS = 2  # the optimism and pessimism terms use the spread |q1 - q2| / 2 of two critics


def networks(config: BROConfig, act_dim: int) -> tuple[nn.Module, nn.Module, nn.Module]:
    """The conservative actor, the optimistic actor and the two-critic ensemble of this config."""
    actor = BroActor(act_dim, config.actor_width, config.actor_depth, config.log_std_min,
                     config.log_std_max, config.init_scale, config.flax_layers)
    optimistic = OptimisticActor(
        config.optimistic_width,
        config.optimistic_depth,
        config.std_multiplier,
        config.shift_init_scale,
        config.init_scale,
        config.flax_layers,
    )
    critic = Ensemble(
        QuantileCritic(config.critic_width, config.critic_depth, config.num_quantiles,
                       config.init_scale, config.flax_layers),
        NUM_CRITICS,
    )
    return actor, optimistic, critic


def init(key: jax.Array, obs_dim: int, act_dim: int, config: BROConfig) -> BROState:
    """Fresh agent state; every network initialised from `key`; target critic = critic."""
    actor_net, optimistic_net, critic_net = shared(networks, config, act_dim)
    k_actor, k_optimistic, k_critic, k_rng = jax.random.split(key, 4)
    obs, act = jnp.zeros((1, obs_dim)), jnp.zeros((1, act_dim))

    def adamw(lr):
        return shared(optax.adamw, lr, weight_decay=config.weight_decay)

    actor = train_state(
        actor_net.apply, actor_net.init(k_actor, obs)["params"], adamw(config.actor_lr)
    )
    optimistic_params = optimistic_net.init(k_optimistic, obs, act, act)["params"]
    optimistic = train_state(optimistic_net.apply, optimistic_params, adamw(config.optimistic_lr))
    critic_params = critic_net.init(k_critic, obs, act)["params"]
    critic = train_state(critic_net.apply, critic_params, adamw(config.critic_lr))

    def scalar(module, lr, b1):
        return train_state(module.apply, module.init(k_rng)["params"],
                           shared(optax.adam, lr, b1=b1))

    def bounded(init_value):
        module = shared(BoundedScalar, init_value, config.scalar_log_min, config.scalar_log_max)
        return scalar(module, config.scalar_lr, config.scalar_b1)

    return BROState(
        actor=actor,
        optimistic_actor=optimistic,
        critic=critic,
        target_critic_params=critic_params,
        temp=scalar(shared(Temperature, config.init_temperature), config.temp_lr, config.temp_b1),
        optimism=bounded(config.init_optimism),
        kl_weight=bounded(config.init_kl_weight),
        rng=k_rng,
        step=jnp.zeros((), jnp.int32),
        target_entropy=jnp.asarray(-config.target_entropy_scale * act_dim, jnp.float32),
    )


def param_counts(obs_dim: int, act_dim: int, config: BROConfig) -> dict[str, int]:
    """Parameters of each network (critic: both critics together), from an abstract init."""
    state = jax.eval_shape(lambda key: init(key, obs_dim, act_dim, config), jax.random.key(0))
    nets = {
        "actor": state.actor.params,
        "optimistic_actor": state.optimistic_actor.params,
        "critic": state.critic.params,
    }
    return {name: sum(math.prod(x.shape) for x in jax.tree.leaves(p)) for name, p in nets.items()}


def _value(scalar: TrainState) -> jax.Array:
    return scalar.apply_fn({"params": scalar.params})


def _conservative(state: BROState, params, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    return state.actor.apply_fn({"params": params}, obs)


def _optimistic(state: BROState, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    mean_c, log_std_c = _conservative(state, state.actor.params, obs)
    params = state.optimistic_actor.params
    return state.optimistic_actor.apply_fn({"params": params}, obs, mean_c, log_std_c)


def acting(state: BROState) -> BROState:
    """The state with only what `act` reads (both actors' parameters); the rest is None."""
    return BROState(actor=state.actor.replace(step=None, opt_state=None),
                    optimistic_actor=state.optimistic_actor.replace(step=None, opt_state=None),
                    critic=None, target_critic_params=None, temp=None, optimism=None,
                    kl_weight=None, rng=None, step=None, target_entropy=None, plasticity=None)


def act(state: BROState, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
    """Actions in [-1, 1] for `obs (..., obs_dim)`: a sample of the optimistic policy (data
    collection), or tanh of the conservative mean when deterministic (evaluation)."""
    if deterministic:
        return jnp.tanh(_conservative(state, state.actor.params, obs)[0])
    mean_o, log_std_o = _optimistic(state, obs)
    return tanh_gaussian_sample(key, mean_o, log_std_o)[0]


def quantile_midpoints(n: int) -> jax.Array:
    """The n quantile levels (2i + 1) / (2n), i = 0..n-1."""
    return (2.0 * jnp.arange(n) + 1.0) / (2.0 * n)


def quantile_huber_loss(
    pred: jax.Array, target: jax.Array, taus: jax.Array, kappa: float = 1.0
) -> jax.Array:
    """Quantile Huber loss of predicted quantiles `pred (B, N)` at levels `taus (N,)` against
    target samples `target (B, M)`: summed over the N predictions, averaged over M and B."""
    td = target[..., None, :] - pred[..., :, None]  # (B, N, M)
    abs_td = jnp.abs(td)
    huber = jnp.where(abs_td <= kappa, 0.5 * td**2, kappa * (abs_td - 0.5 * kappa))
    weight = jnp.abs(taus[:, None] - (td < 0).astype(td.dtype))
    return jnp.mean(jnp.sum(weight * huber / kappa, axis=-2))


def gaussian_kl(
    mean_p: jax.Array, log_std_p: jax.Array, mean_q: jax.Array, log_std_q: jax.Array
) -> jax.Array:
    """KL(N(mean_p, std_p) || N(mean_q, std_q)) of diagonal Gaussians `(..., d)`, summed over d.

    Equal to the KL of their tanh-squashed policies (tanh is a bijection)."""
    var_ratio = jnp.exp(2.0 * (log_std_p - log_std_q))
    mahalanobis = ((mean_p - mean_q) * jnp.exp(-log_std_q)) ** 2
    return 0.5 * jnp.sum(var_ratio + mahalanobis - 1.0, axis=-1) + jnp.sum(
        log_std_q - log_std_p, axis=-1
    )


def _bound(quantiles: jax.Array, beta: jax.Array | float) -> jax.Array:
    """mean(q1, q2) + beta |q1 - q2| / 2 over the critic axis of `(2, ..., N)`."""
    return quantiles.mean(axis=0) + beta * jnp.abs(quantiles[0] - quantiles[1]) / 2.0


def critic_loss(state: BROState, batch: Batch, key: jax.Array, config: BROConfig):
    """`params -> (quantile loss, mean quantile)`: target r + gamma (mean - beta_pess spread -
    alpha log pi), per quantile, fixed."""
    mean, log_std = _conservative(state, state.actor.params, batch.next_observations)
    next_actions, next_log_probs = tanh_gaussian_sample(key, mean, log_std)
    next_quantiles = state.critic.apply_fn(
        {"params": state.target_critic_params}, batch.next_observations, next_actions
    )
    entropy_term = _value(state.temp) * next_log_probs[:, None]
    next_v = _bound(next_quantiles, -config.pessimism) - entropy_term
    target = batch.rewards[:, None] + config.discount * batch.masks[:, None] * next_v
    taus = quantile_midpoints(config.num_quantiles)

    def loss_fn(params):
        quantiles = state.critic.apply_fn({"params": params}, batch.observations, batch.actions)
        losses = jax.vmap(quantile_huber_loss, in_axes=(0, None, None, None))(
            quantiles, target, taus, config.kappa
        )
        return losses.sum(), quantiles.mean()

    return loss_fn


def update_critic(state: BROState, batch: Batch, key: jax.Array, config: BROConfig, hooks=None):
    """Quantile TD step on `critic_loss`."""
    loss_fn = penalized(critic_loss(state, batch, key, config), hooks, "critic.params",
                        state.plasticity)
    (_, (q, loss, penalty)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.critic.params)
    critic = state.critic.apply_gradients(grads=grads)
    return state.replace(critic=critic), with_penalty({"critic_loss": loss, "q": q}, "critic",
                                                      penalty)


def actor_loss(state: BROState, batch: Batch, key: jax.Array, config: BROConfig):
    """`params -> (SAC actor loss, entropy)` on the mean over quantiles of mean(q1, q2) -
    beta_pess |q1 - q2| / 2."""
    temperature = _value(state.temp)

    def loss_fn(params):
        mean, log_std = _conservative(state, params, batch.observations)
        actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
        quantiles = state.critic.apply_fn(
            {"params": state.critic.params}, batch.observations, actions
        )
        q = _bound(quantiles, -config.pessimism).mean(axis=-1)
        return (temperature * log_probs - q).mean(), -log_probs.mean()

    return loss_fn


def update_actor(state: BROState, batch: Batch, key: jax.Array, config: BROConfig, hooks=None):
    """SAC actor step on `actor_loss`."""
    loss_fn = penalized(actor_loss(state, batch, key, config), hooks, "actor.params",
                        state.plasticity)
    (_, (entropy, loss, penalty)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.actor.params)
    actor = state.actor.apply_gradients(grads=grads)
    return state.replace(actor=actor), with_penalty({"actor_loss": loss, "entropy": entropy},
                                                    "actor", penalty)


def optimistic_loss(state: BROState, batch: Batch, key: jax.Array, config: BROConfig):
    """`params -> (loss, KL)`: maximise mean(q1, q2) + beta_opt |q1 - q2| / 2 minus lambda_KL
    KL(pi_o, pi_c).

    As in the BRO reference, the KL compares pi_o with its std multiplier undone (std_o /
    std_multiplier = std_c), i.e. it measures the learned mean shift; the fixed std ratio alone
    would add 0.069 nats per action dimension at 0.75, above the 0.05 target.
    """
    mean_c, log_std_c = _conservative(state, state.actor.params, batch.observations)
    optimism, kl_weight = _value(state.optimism), _value(state.kl_weight)
    std_shift = jnp.log(config.std_multiplier)

    def loss_fn(params):
        mean_o, log_std_o = state.optimistic_actor.apply_fn(
            {"params": params}, batch.observations, mean_c, log_std_c
        )
        actions, _ = tanh_gaussian_sample(key, mean_o, log_std_o)
        quantiles = state.critic.apply_fn(
            {"params": state.critic.params}, batch.observations, actions
        )
        q_upper = _bound(quantiles, optimism).mean(axis=-1)
        kl = gaussian_kl(mean_o, log_std_o - std_shift, mean_c, log_std_c).mean()
        return -q_upper.mean() + kl_weight * kl, kl

    return loss_fn


def update_optimistic_actor(state: BROState, batch: Batch, key: jax.Array, config: BROConfig,
                            hooks=None):
    """A step on `optimistic_loss`; metrics incl. "kl": the KL per action dimension that drives
    the scalars."""
    loss_fn = penalized(optimistic_loss(state, batch, key, config), hooks,
                        "optimistic_actor.params", state.plasticity)
    (_, (kl, loss, penalty)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.optimistic_actor.params)
    optimistic = state.optimistic_actor.apply_gradients(grads=grads)
    kl_per_dim = kl / batch.actions.shape[-1]
    return state.replace(optimistic_actor=optimistic), with_penalty({
        "optimistic_actor_loss": loss,
        "kl": kl_per_dim,
    }, "optimistic_actor", penalty)


def _scalar_step(scalar: TrainState, slope: jax.Array) -> tuple[TrainState, jax.Array]:
    """One optimizer step on the loss value * slope (slope held fixed); returns the new value."""
    grads = jax.grad(lambda p: scalar.apply_fn({"params": p}) * slope)(scalar.params)
    scalar = scalar.apply_gradients(grads=grads)
    return scalar, _value(scalar)


def update_scalars(state: BROState, entropy: jax.Array, kl: jax.Array, config: BROConfig):
    """Temperature towards the target entropy; then, with KL per dimension above target_kl,
    beta_opt goes down and lambda_KL up (below target: the reverse), as in the BRO reference."""
    temp, temperature = _scalar_step(state.temp, entropy - state.target_entropy)
    optimism, beta = _scalar_step(state.optimism, kl - config.target_kl)
    kl_weight, lam = _scalar_step(state.kl_weight, config.target_kl - kl)
    state = state.replace(temp=temp, optimism=optimism, kl_weight=kl_weight)
    return state, {"temperature": temperature, "optimism": beta, "kl_weight": lam}


def update_step(state: BROState, batch: Batch, config: BROConfig, hooks=None):
    """One gradient step: critic, target, actor, optimistic actor, temperature, scalars; then
    the interventions' per-step hooks (`hooks`: interventions.Hooks, or None)."""
    rng, k_critic, k_actor, k_optimistic = jax.random.split(state.rng, 4)
    state, critic_info = update_critic(state, batch, k_critic, config, hooks)
    state = state.replace(
        target_critic_params=polyak(state.critic.params, state.target_critic_params, config.tau)
    )
    state, actor_info = update_actor(state, batch, k_actor, config, hooks)
    state, optimistic_info = update_optimistic_actor(state, batch, k_optimistic, config, hooks)
    state, scalar_info = update_scalars(
        state, actor_info["entropy"], optimistic_info["kl"], config
    )
    state = state.replace(rng=rng, step=state.step + 1)
    return after_step(state, hooks), {**critic_info, **actor_info, **optimistic_info,
                                      **scalar_info}


def update(state: BROState, batches: Batch, config: BROConfig, hooks=None):
    """`batches` leaves are `(utd, batch, ...)`; one scan over the utd axis. Metrics are means."""
    step = functools.partial(update_step, config=config, hooks=hooks)
    state, infos = jax.lax.scan(step, state, batches)
    return state, jax.tree.map(jnp.mean, infos)


def loss_grads(state: BROState, batch: Batch, key: jax.Array, config: BROConfig) -> dict:
    """Gradients of the critic's, the actor's and the optimistic actor's losses on `batch` (no
    penalties), keyed by the state path of the parameters they are taken with respect to."""
    keys = jax.random.split(key, 3)
    losses = {"critic.params": critic_loss, "actor.params": actor_loss,
              "optimistic_actor.params": optimistic_loss}
    params = {"critic.params": state.critic.params, "actor.params": state.actor.params,
              "optimistic_actor.params": state.optimistic_actor.params}
    return {path: jax.grad(lambda p, fn=fn, k=k: fn(state, batch, k, config)(p)[0])(params[path])
            for (path, fn), k in zip(losses.items(), keys, strict=True)}


def features(state: BROState, batch: Batch) -> dict[str, dict[str, jax.Array]]:
    """Hidden features `(..., batch, units)` of both actors and the critics on `batch`."""
    mean_c, log_std_c = _conservative(state, state.actor.params, batch.observations)
    return {
        "actor": sow_features(state.actor.apply_fn, state.actor.params, batch.observations),
        "optimistic_actor": sow_features(
            state.optimistic_actor.apply_fn,
            state.optimistic_actor.params,
            batch.observations,
            mean_c,
            log_std_c,
        ),
        "critic": sow_features(
            state.critic.apply_fn, state.critic.params, batch.observations, batch.actions
        ),
    }


def weights(state: BROState) -> dict[str, flax.core.FrozenDict]:
    """The parameter trees whose weight matrices the diagnostics report."""
    return {
        "actor": state.actor.params,
        "optimistic_actor": state.optimistic_actor.params,
        "critic": state.critic.params,
        "target_critic": state.target_critic_params,
    }

