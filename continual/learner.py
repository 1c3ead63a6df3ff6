"""The continual supervised learner: a classifier trained by one optimizer on cross-entropy.

Pure functions over one `ClassifierState` pytree, bound to a config (and the interventions'
per-step hooks) by `make_learner`, which also says, as an `interventions.registry.Learner`,
which parts of the state the interventions act on. The hooks enter exactly as in the RL agents
(agents/common.py): `penalized` adds the loss terms to the loss, `after_step` runs the
projections after each gradient step, `hooks.init` fills `state.plasticity`.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from learners.hooks import after_step, penalized, with_penalty
from learners.train_state import train_state
from networks.classifiers import Classifier, ConvClassifier
from networks.common import RELU_GAIN
from networks.inits import DEFAULT_INIT, INITS

NETWORKS = ("mlp", "conv")
OPTIMIZERS = ("adam", "sgd", "muon")
# Adam's 1e-3 is the common choice in these benchmarks (Dohare et al. 2024; Kumar et al. 2023;
# docs/algorithms.md): the paper gives no optimizer. SGD and Muon read the same --learning_rate.
DEFAULT_LEARNING_RATE = 1e-3


class Examples(NamedTuple):
    """Inputs x (..., *input_shape) float32 and integer labels y (...)."""

    x: jax.Array
    y: jax.Array


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """The network and its optimizer."""

    network: str = "mlp"
    input_shape: tuple[int, ...] = (784,)
    num_classes: int = 10
    hidden_dims: tuple[int, ...] = (256,)
    channels: tuple[int, ...] = ()  # conv blocks' widths (network "conv")
    layer_norm: bool = True
    init_scale: float = RELU_GAIN
    init: str = DEFAULT_INIT  # the kernels' and biases' scheme (networks/inits.py)
    optimizer: str = "adam"
    learning_rate: float = DEFAULT_LEARNING_RATE
    weight_decay: float = 0.0  # decoupled: AdamW with adam

    def __post_init__(self):
        if self.network not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {self.network!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got "
                             f"{self.optimizer!r}")
        if not self.hidden_dims or any(w <= 0 for w in self.hidden_dims):
            raise ValueError(f"hidden_dim must be positive, got {self.hidden_dims}")
        if self.network == "conv" and (not self.channels or any(c <= 0 for c in self.channels)):
            raise ValueError(f"channels must be positive widths, got {self.channels}")
        if not (self.learning_rate > 0 and self.learning_rate < float("inf")):
            raise ValueError(f"learning_rate must be a finite number > 0, got "
                             f"{self.learning_rate}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if not (0 <= self.weight_decay < float("inf")):
            raise ValueError(f"weight_decay must be a finite number >= 0, got "
                             f"{self.weight_decay}")

    @property
    def batch_norm(self) -> bool:
        return self.network == "conv"


@flax.struct.dataclass
class ClassifierState:
    net: TrainState  # parameters, optimizer state, step count
    batch_stats: dict  # BatchNorm's running statistics ({} without BatchNorm)
    plasticity: dict = dataclasses.field(default_factory=dict)  # per-step interventions' state


def network(config: LearnerConfig):
    if config.network == "conv":
        return ConvClassifier(config.channels, config.hidden_dims, config.num_classes,
                              config.layer_norm, config.init_scale, config.init)
    return Classifier(config.hidden_dims, config.num_classes, config.layer_norm,
                      config.init_scale, config.init)


def optimizer(config: LearnerConfig) -> optax.GradientTransformation:
    """Adam, plain SGD, or optax's Muon (Adam for what is not a 2-D matrix). A weight decay
    is decoupled, on every parameter, as lr * weight_decay * theta per step: AdamW
    (`optax.adamw`, as PyTorch's AdamW), SGD's decayed weights, Muon's own."""
    lr, decay = config.learning_rate, config.weight_decay
    if config.optimizer == "sgd":
        sgd = optax.sgd(lr)
        return optax.chain(optax.add_decayed_weights(decay), sgd) if decay else sgd
    if config.optimizer == "muon":
        if decay:
            return optax.contrib.muon(lr, weight_decay=decay, adam_weight_decay=decay)
        return optax.contrib.muon(lr)
    return optax.adamw(lr, weight_decay=decay) if decay else optax.adam(lr)


def init(key: jax.Array, config: LearnerConfig) -> ClassifierState:
    """A fresh learner: the network initialised from `key`, a new optimizer state."""
    net = network(config)
    variables = net.init(key, jnp.zeros((1, *config.input_shape)), train=False)
    return ClassifierState(
        net=train_state(net.apply, variables["params"], optimizer(config)),
        batch_stats=dict(variables.get("batch_stats", {})))


def _variables(state: ClassifierState, params) -> dict:
    return {"params": params, **({"batch_stats": state.batch_stats} if state.batch_stats else {})}


def _forward(state: ClassifierState, params, x: jax.Array, train: bool):
    """(logits, batch_stats after this batch): train mode normalises with the batch's
    statistics and updates the running ones."""
    if not state.batch_stats:
        return state.net.apply_fn({"params": params}, x, train=train), state.batch_stats
    if not train:
        return state.net.apply_fn(_variables(state, params), x, train=False), state.batch_stats
    logits, updates = state.net.apply_fn(_variables(state, params), x, train=True,
                                         mutable=["batch_stats"])
    return logits, dict(updates["batch_stats"])


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def loss_fn(state: ClassifierState, batch: Examples) -> Callable:
    """`params -> (cross-entropy on batch, (logits, batch_stats after it))` in train mode."""

    def fn(params):
        logits, batch_stats = _forward(state, params, batch.x, train=True)
        return cross_entropy(logits, batch.y), (logits, batch_stats)

    return fn


def update(state: ClassifierState, batch: Examples, hooks=None):
    """One gradient step on `batch` (x (batch, ...), y (batch,)), then the hooks' per-step
    methods. Metrics: loss and accuracy of the network before the step, on this batch (the
    online accuracy's a_t), and the loss terms where there are any."""
    fn = penalized(loss_fn(state, batch), hooks, "net.params", state.plasticity)
    (_, ((logits, batch_stats), loss, penalty)), grads = jax.value_and_grad(fn, has_aux=True)(
        state.net.params)
    state = state.replace(net=state.net.apply_gradients(grads=grads), batch_stats=batch_stats)
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == batch.y)
    return after_step(state, hooks), with_penalty({"loss": loss, "accuracy": accuracy}, "net",
                                                  penalty)


def predict(state: ClassifierState, x: jax.Array) -> jax.Array:
    """Logits of x (batch, ...) in evaluation mode (BatchNorm's running statistics)."""
    return _forward(state, state.net.params, x, train=False)[0]


def features(state: ClassifierState, batch: Examples) -> dict[str, dict[str, jax.Array]]:
    """Hidden features (batch, units) of the network on batch.x in evaluation mode, as its
    layers record them with `sow` (networks/classifiers.py)."""
    _, recorded = state.net.apply_fn(_variables(state, state.net.params), batch.x, train=False,
                                     mutable=["intermediates"])
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(recorded["intermediates"]),
                                           sep="/")
    return {"net": {path: value[0] for path, value in flat.items()}}


def loss_grads(state: ClassifierState, batch: Examples, key: jax.Array) -> dict:
    """The gradient of the cross-entropy on `batch` (no loss terms), by parameter path."""
    del key  # the loss draws nothing at random
    grads = jax.grad(lambda p: loss_fn(state, batch)(p)[0])(state.net.params)
    return {"net.params": grads}


def weights(state: ClassifierState) -> dict:
    return {"net": state.net.params}


class Learner(NamedTuple):
    """The learner with its config bound: an `interventions.registry.Learner`."""

    name: str
    config: LearnerConfig
    init: Callable  # key -> state (with the hooks' per-step state)
    update: Callable  # (state, batch) -> (state, metrics), one gradient step
    predict: Callable  # (state, x) -> logits
    features: Callable
    weights: Callable
    loss_grads: Callable
    networks: dict[str, str]
    param_parts: tuple[str, ...]
    train_parts: tuple[str, ...]
    reset_parts: tuple[str, ...]
    reset_to: str


def make_learner(config: LearnerConfig, hooks: Any = None) -> Learner:
    """The learner of `config` with the interventions' per-step `hooks` (None: none). A reset
    re-initialises the network, its optimizer state and BatchNorm's statistics with a new key."""

    def init_fn(key):
        state = init(key, config)
        return state if hooks is None or hooks.init is None else hooks.init(state)

    return Learner(
        name="continual",
        config=config,
        init=init_fn,
        update=lambda state, batch: update(state, batch, hooks),
        predict=predict,
        features=features,
        weights=weights,
        loss_grads=loss_grads,
        networks={"net": "net.params"},
        param_parts=("net.params",),
        train_parts=("net.params",),
        reset_parts=(("net", "batch_stats") if config.batch_norm else ("net",)) + ("plasticity",),
        reset_to="fresh",
    )
