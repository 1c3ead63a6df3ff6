"""The anisotropic-initialisation experiment (docs/continual.md, launch/anisotropic_init.py):
the steps a network needs to fit a fixed subset of a stationary task when every weight matrix
starts with d unit singular values and the rest near zero."""

import jax
import jax.numpy as jnp
import numpy as np

from continual.learner import Examples, LearnerConfig, make_learner
from interventions.matrices import is_weight_matrix


def anisotropic(kernel: np.ndarray, d: int, small: float) -> np.ndarray:
    """kernel (m, n) as U diag(s) V^T with its own singular vectors, s = 1 for the first
    min(d, k) and `small` for the rest, rescaled to the kernel's Frobenius norm."""
    u, s, vt = np.linalg.svd(kernel.astype(np.float64), full_matrices=False)
    values = np.where(np.arange(len(s)) < d, 1.0, small)
    w = (u * values) @ vt
    return (w * np.linalg.norm(kernel) / np.linalg.norm(w)).astype(np.float32)


def with_anisotropy(params, d: int, small: float):
    """Every weight matrix of `params` (a leading seed axis) made anisotropic, seed by seed."""

    def visit(path, leaf):
        if not is_weight_matrix(path, leaf[0]):
            return leaf
        return np.stack([anisotropic(np.asarray(k), d, small) for k in leaf])

    return jax.tree_util.tree_map_with_path(visit, jax.device_get(params))


def steps_to_fit(images: np.ndarray, labels: np.ndarray, d: int, config: LearnerConfig, *,
                 seeds: int, small: float, target: float, max_steps: int, eval_every: int,
                 batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, reached) per seed: the steps (counted every `eval_every`, at most `max_steps`)
    the learner of `config`, its weight matrices started with `d` unit singular values and
    the rest `small`, needs to reach `target` accuracy on `images`, trained on minibatches of
    `batch_size` in a new shuffle every epoch."""
    n = len(labels)
    learner = make_learner(config)
    states = jax.vmap(learner.init)(jnp.stack([jax.random.key(s) for s in range(seeds)]))
    params = with_anisotropy(states.net.params, d, small)
    states = states.replace(net=states.net.replace(params=jax.tree.map(jnp.asarray, params)))
    x, y = jnp.asarray(images), jnp.asarray(labels)

    @jax.jit
    def train(states, order):
        def one(state, order):
            def step(state, positions):
                return learner.update(state, Examples(x[positions], y[positions]))[0], None

            state = jax.lax.scan(step, state, order)[0]
            return state, jnp.mean(jnp.argmax(learner.predict(state, x), -1) == y)

        return jax.vmap(one)(states, order)

    rngs = [np.random.default_rng([s, d]) for s in range(seeds)]
    pending = [np.empty(0, np.int64)] * seeds
    steps = np.full(seeds, max_steps)
    reached = np.zeros(seeds, bool)
    per_call = eval_every * batch_size
    for done in range(eval_every, max_steps + 1, eval_every):
        for s in range(seeds):
            while len(pending[s]) < per_call:
                pending[s] = np.concatenate([pending[s], rngs[s].permutation(n)])
        order = np.stack([p[:per_call] for p in pending])
        pending = [p[per_call:] for p in pending]
        states, accuracy = train(states, order.reshape(seeds, eval_every, -1))
        fitted = (np.asarray(accuracy) >= target) & ~reached
        steps[fitted], reached = done, reached | fitted
        if reached.all():
            break
    return steps, reached
