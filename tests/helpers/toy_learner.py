"""A small supervised learner for the interventions' tests: an MLP classifier (networks.MLP and a
Dense head, as the continual benchmarks' MLP) or a conv net (Conv_i, BatchNorm_i, ReLU, max-pool,
then Dense_0, LayerNorm_0, ReLU, Dense_1), trained with Adam on cross-entropy. It is the
interventions' `Learner`, as an RL agent is."""

from collections.abc import Sequence
from typing import Any, NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

from networks import MLP
from networks.layers import Dense, LayerNorm


class Examples(NamedTuple):
    x: jax.Array  # (..., inputs) or (..., h, w, c)
    y: jax.Array  # (...,) int labels


class Classifier(nn.Module):
    """MLP_0 (Dense_i, LayerNorm_i, ReLU, sowed hidden_i), then the head Dense_0."""

    hidden: Sequence[int]
    classes: int

    @nn.compact
    def __call__(self, x):
        return Dense(self.classes)(MLP(self.hidden)(x))


class ConvNet(nn.Module):
    """Conv_i -> BatchNorm_i -> ReLU (sowed hidden_i) -> 2x2 max-pool per channel count, then
    flatten, Dense_0 -> LayerNorm_0 -> ReLU (sowed hidden_<convs>), Dense_1."""

    channels: Sequence[int]
    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x):
        for i, channels in enumerate(self.channels):
            x = nn.Conv(channels, (3, 3), name=f"Conv_{i}")(x)
            x = nn.relu(nn.BatchNorm(use_running_average=True, name=f"BatchNorm_{i}")(x))
            self.sow("intermediates", f"hidden_{i}", x)
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape(*x.shape[:-3], -1)
        x = nn.relu(LayerNorm(name="LayerNorm_0")(Dense(self.hidden, name="Dense_0")(x)))
        self.sow("intermediates", f"hidden_{len(self.channels)}", x)
        return Dense(self.classes, name="Dense_1")(x)


@flax.struct.dataclass
class ToyState:
    net: TrainState
    batch_stats: Any


class ToyLearner(NamedTuple):
    """The `interventions.registry.Learner` of one network, "net"."""

    module: nn.Module
    networks: dict = {"net": "net.params"}
    param_parts: tuple = ("net.params",)
    train_parts: tuple = ("net.params",)
    reset_parts: tuple = ("net",)
    reset_to: str = "fresh"

    def init(self, key, example) -> ToyState:
        variables = self.module.init(key, example)
        net = TrainState.create(apply_fn=self.module.apply, params=variables["params"],
                                tx=optax.adam(1e-3))
        return ToyState(net, variables.get("batch_stats", {}))

    def _apply(self, state, params, x, **kwargs):
        variables = {"params": params}
        if state.batch_stats:
            variables["batch_stats"] = state.batch_stats
        return self.module.apply(variables, x, **kwargs)

    def loss(self, state, params, batch):
        logits = self._apply(state, params, batch.x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch.y).mean()

    def loss_grads(self, state, batch, key):
        del key  # the loss is deterministic
        return {"net.params": jax.grad(lambda p: self.loss(state, p, batch))(state.net.params)}

    def features(self, state, batch):
        _, out = self._apply(state, state.net.params, batch.x, mutable=["intermediates"])
        flat = flax.traverse_util.flatten_dict(out["intermediates"], sep="/")
        return {"net": {path: value[0] for path, value in flat.items()}}

    def train(self, state, batches: Examples):
        """Adam steps on each of `batches` (leaves (steps, batch, ...))."""
        def step(state, batch):
            grads = self.loss_grads(state, batch, None)["net.params"]
            return state.replace(net=state.net.apply_gradients(grads=grads)), None

        return jax.lax.scan(step, state, batches)[0]


def examples(shape: tuple[int, ...], classes: int, lead: tuple[int, ...], seed: int = 0):
    """Random inputs of `shape` per example and labels, with leading axes `lead`."""
    rng = np.random.default_rng(seed)
    return Examples(jnp.asarray(rng.normal(size=(*lead, *shape)), jnp.float32),
                    jnp.asarray(rng.integers(0, classes, size=lead), jnp.int32))
