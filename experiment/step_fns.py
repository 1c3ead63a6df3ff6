"""The RL training loop's compiled functions, jitted and vmapped over seeds (the agent's init,
its update, the next actions, the evaluation actions), and the evaluation episodes they drive.

They are made once per agent (its functions) in a process: a run of the same agent, config and
interventions as an earlier run of the process (a notebook's, a test's) calls the compiled
programs of that run instead of tracing and lowering them again."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from agents import Agent
from learners.batch import Batch


def seed_init(agent: Agent, seeds, obs_dim: int, act_dim: int):
    """The jitted, seed-vmapped `agent.init` and the seeds' keys it initialises them from:
    `jax.random.key(s)` of each seed s (below 2**32), made in one vectorised call."""
    keys = _seed_keys(np.asarray(seeds, dtype=np.uint32))
    return _seed_init(agent.init, obs_dim, act_dim), keys


_seed_keys = jax.jit(jax.vmap(jax.random.key))
# Each seed's key folded with one number: (keys, data) -> keys.
fold_seeds = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))


# How many agents' programs a process keeps: those of the runs it made last.
PROGRAMS_KEPT = 8


@functools.lru_cache(maxsize=PROGRAMS_KEPT)
def _seed_init(init, obs_dim: int, act_dim: int):
    return jax.jit(jax.vmap(lambda k: init(k, obs_dim, act_dim)))


def to_batch(sample: dict[str, np.ndarray]) -> Batch:
    return Batch(**{field: sample[field] for field in Batch._fields})


def seeds_update(agent: Agent):
    """`agent.update` vmapped over seeds and jitted: the loop's update and `zero_metrics` call
    this one function, so JAX traces the update once between them."""
    return _seeds_update(agent.update)


@functools.lru_cache(maxsize=PROGRAMS_KEPT)
def _seeds_update(update):
    return jax.jit(jax.vmap(update))


def make_step_fns(agent: Agent, update_seeds):
    """Jitted, seed-vmapped functions of the loop: the update (the UTD gradient steps of every
    seed through `update_seeds`, `seeds_update(agent)`, summing their metrics), the next actions
    and the evaluation actions.

    The next env step's actions are drawn with a key derived from the loop's keys, which the
    update advances and `next_actions` leaves as they are: drawn again after an intervention,
    they use the same randomness, so an intervention that changes no weight (a clip with
    nothing outside [1/c, c]) changes nothing in the run.

    The action functions take the seeds' states as they are and pass only `agent.acting` of them
    to their programs: the actor's parameters, not the critics and optimizer states."""
    return _step_fns(agent.act, agent.acting, update_seeds)


@functools.lru_cache(maxsize=PROGRAMS_KEPT)
def _step_fns(act, acting, update_seeds):
    def next_actions(states, obs, keys):
        act_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
        return jax.vmap(act, in_axes=(0, 0, 0, None))(states, obs, act_keys, False)

    def update_step(states, batches, keys, metric_sums):
        states, metrics = update_seeds(states, batches)
        keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        metric_sums = jax.tree.map(jnp.add, metric_sums, metrics)
        return states, keys, metric_sums

    def eval_act(states, obs):
        return jax.vmap(act, in_axes=(0, 0, None, None))(states, obs, None, True)

    next_jit, eval_jit = jax.jit(next_actions), jax.jit(eval_act)
    return (jax.jit(update_step, donate_argnums=(0, 3)),
            lambda states, obs, keys: next_jit(acting(states), obs, keys),
            lambda states, obs: eval_jit(acting(states), obs))


def evaluate(eval_act, states, env, episodes: int) -> np.ndarray:
    """Mean undiscounted return over `episodes` deterministic episodes, per seed: (seeds,)."""
    totals = np.zeros(env.num_envs)
    for _ in range(episodes):
        obs, done = env.reset(), np.zeros(env.num_envs, bool)
        while not done.all():
            actions = np.asarray(eval_act(states, obs))
            obs, rewards, terminated, truncated = env.step(actions, active=~done)
            totals += np.where(done, 0.0, rewards)
            done |= terminated | truncated
    return totals / episodes


def zero_metrics(update_seeds, states, batch_shape: tuple[int, int, int], obs_dim: int, act_dim):
    """A zero pytree with the structure and shapes of the metrics of `update_seeds` (see
    `seeds_update`)."""
    seeds, utd, batch = batch_shape
    dummy = Batch(
        observations=jax.ShapeDtypeStruct((seeds, utd, batch, obs_dim), jnp.float32),
        actions=jax.ShapeDtypeStruct((seeds, utd, batch, act_dim), jnp.float32),
        rewards=jax.ShapeDtypeStruct((seeds, utd, batch), jnp.float32),
        next_observations=jax.ShapeDtypeStruct((seeds, utd, batch, obs_dim), jnp.float32),
        masks=jax.ShapeDtypeStruct((seeds, utd, batch), jnp.float32),
    )
    shapes = update_seeds.eval_shape(states, dummy)[1]
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
