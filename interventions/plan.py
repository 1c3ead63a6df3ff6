"""A run's interventions, resolved against its learner: per-step hooks and the scheduled event.

`make_plan(spec, settings, learner)` takes an --intervention value ("clip", "nap+clip"), the
run's method settings ({flag name: value}) and the learner (its part lists), and gives

- `hooks`: what the learner's update calls (`Hooks`): `init` fills `state.plasticity` with each
  per-step method's state (initial norms, anchors, power-iteration vectors), `penalty(path,
  params, plasticity)` is the loss terms of the network at `path` (of the parts at or inside
  it: a loss term's parts must lie in trained parameters), `after_step(state)` the
  projections and the loss terms' state updates after each gradient step;
- `event`: `(state, ctx) -> state` for one seed, or None, with the method that makes it.

Per-step state lives in `state.plasticity` as {method name: (aux of each part, ...)}, so it is
checkpointed, vmapped over seeds and reset like every other part of the state.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from interventions.matrices import is_weight_matrix
from interventions.parts import check_paths, get_part, optimizer_owners, part_paths, set_part
from interventions.registry import EventContext, Method, parse

PyTree = Any
PLASTICITY = "plasticity"  # the learner state's field that holds per-step methods' state
# What an event does to the optimizer state of each network it acts on: what the method itself
# does ("method": clip keeps it, a reset starts it anew, ReDo zeroes the moments it recycles),
# keep it as it was before the event, or reset it to its initial value (`tx.init`).
EVENT_OPT_STATES = ("method", "keep", "reset")


class Hooks(NamedTuple):
    """What a learner's update calls; None: nothing to call (the update is as without)."""

    init: Callable | None = None  # state -> state, with state.plasticity filled
    penalty: Callable | None = None  # (path, params, plasticity) -> scalar for that network
    after_step: Callable | None = None  # state -> state, after each gradient step


NO_HOOKS = Hooks()


class Bound(NamedTuple):
    """A method with its config and the state paths it acts on."""

    method: Method
    config: Any
    parts: tuple[str, ...]


class Plan(NamedTuple):
    bound: tuple[Bound, ...]
    hooks: Hooks
    event: Bound | None
    event_opt_state: str = "method"  # one of EVENT_OPT_STATES

    def apply_event(self, state: PyTree, ctx: EventContext) -> PyTree:
        """The event on one seed's state (`jax.vmap` it over seeds), then, unless
        `event_opt_state` is "method", the optimizer state of each network it acts on (the
        owners of its parts) as it was before the event ("keep") or initial ("reset")."""
        new = self.event.method.apply(state, self.event.parts, self.event.config, ctx)
        if self.event_opt_state == "method":
            return new
        for owner in optimizer_owners(new, self.event.parts):
            train_state = get_part(new, owner)
            opt_state = (get_part(state, owner).opt_state if self.event_opt_state == "keep"
                         else train_state.tx.init(train_state.params))
            new = set_part(new, owner, train_state.replace(opt_state=opt_state))
        return new


def resolve_parts(method: Method, config: Any, learner: Any) -> tuple[str, ...]:
    """The state paths a method acts on: its `parts` setting, else the learner's default."""
    return tuple(config.parts) or tuple(getattr(learner, method.default_parts))


def check_parts(state: PyTree, bound: Bound, learner: Any = None) -> None:
    """ValueError (naming the --<prefix>_parts flag) unless each part exists, none overlaps
    another, and, for methods on parameters, each holds a weight matrix and no optimizer
    state; then the method's own `validate` (with `learner`, when given). `state` may be
    abstract (jax.eval_shape of the learner's init); the learner's default parts for the
    method are named in the messages."""
    method, flag = bound.method, bound.method.flag("parts")
    try:
        paths = check_paths(state, bound.parts)
    except ValueError as error:
        raise ValueError(f"--{flag}: {error}") from None
    if method.params_only:
        default = getattr(learner, method.default_parts, ()) if learner is not None else ()
        _check_params(state, method, flag, paths, default)
    if method.kind != "event":  # its init, traced, refuses a part it cannot act on
        for path in paths:
            try:
                jax.eval_shape(lambda params: method.init(params, bound.config),
                               get_part(state, path))
            except ValueError as error:
                raise ValueError(f"{method.name} cannot act on {path} (--{flag}): {error}") \
                    from None
    if method.validate is not None:
        method.validate(state, bound.parts, bound.config, learner)


def _check_params(state: PyTree, method: Method, flag: str, paths: list[str],
                  default: Sequence[str]) -> None:
    """ValueError unless each path holds a weight matrix and no optimizer state (`default`: the
    learner's default parts, named in the message)."""
    for path in paths:
        inside = [path] + part_paths(get_part(state, path), f"{path}.")
        optimizer = [p for p in inside if p.split(".")[-1] == "opt_state"]
        if optimizer:
            params = [p for p in inside if p.split(".")[-1] == "params"]
            hint = f"; name its parameters instead: {', '.join(params)}" if params else ""
            raise ValueError(f"--{flag}={path} includes the optimizer state {optimizer[0]}, "
                             f"which {method.name} must not touch{hint}")
        if path.split(".")[-1] == "kernel":
            raise ValueError(f"--{flag}={path} names a kernel itself; name the layer that holds "
                             f"it ({path.rsplit('.', 1)[0]}) or a part above it")
        leaves = jax.tree_util.tree_flatten_with_path(get_part(state, path))[0]
        if not any(is_weight_matrix(key_path, leaf) for key_path, leaf in leaves):
            hint = f"; the parts it acts on by default: {','.join(default)}" if default else ""
            raise ValueError(f"--{flag}={path} holds no weight matrix (a kernel), so {method.name} "
                             f"would change nothing there{hint}")


def _hooks(per_step: Sequence[Bound]) -> Hooks:
    """The hooks of the per-step methods; equal methods get the same functions, so that equal
    plans make the same agent and its compiled programs serve both (agents.make_agent)."""
    if not per_step:
        return NO_HOOKS
    try:
        return _shared_hooks(tuple(per_step))
    except TypeError:  # a config that cannot be a key: hooks of its own
        return _make_hooks(per_step)


@functools.lru_cache(maxsize=8)
def _shared_hooks(per_step: tuple[Bound, ...]) -> Hooks:
    return _make_hooks(per_step)


def _make_hooks(per_step: Sequence[Bound]) -> Hooks:
    losses = [b for b in per_step if b.method.kind == "loss"]
    after = [b for b in per_step
             if b.method.kind == "projection" or b.method.update_aux is not None]

    def init(state):
        aux = {b.method.name: tuple(b.method.init(get_part(state, p), b.config) for p in b.parts)
               for b in per_step}
        return dataclasses.replace(state, **{PLASTICITY: aux})

    def penalty(path: str, params, plasticity) -> jax.Array:
        total = jnp.zeros((), jnp.float32)
        for b in losses:
            for i, part in enumerate(b.parts):  # the network at `path`, or a part inside it
                if part == path or part.startswith(path + "."):
                    inside = params if part == path else get_part(params, part[len(path) + 1:])
                    total = total + b.method.penalty(inside, plasticity[b.method.name][i],
                                                     b.config)
        return total

    def after_step(state):
        plasticity = dict(getattr(state, PLASTICITY))
        for b in after:
            method, auxes = b.method, list(plasticity[b.method.name])
            for i, path in enumerate(b.parts):
                params = get_part(state, path)
                if method.kind == "projection":
                    params = method.project(params, auxes[i], b.config)
                    state = set_part(state, path, params)
                if method.update_aux is not None:
                    auxes[i] = method.update_aux(params, auxes[i], b.config)
            plasticity[method.name] = tuple(auxes)
        return dataclasses.replace(state, **{PLASTICITY: plasticity})

    return Hooks(init=init, penalty=penalty if losses else None,
                 after_step=after_step if after else None)


def _check_trained(method: Method, parts: Sequence[str], trained: tuple[str, ...]) -> None:
    """ValueError unless each part of a loss term lies in parameters that gradient steps train
    (a loss term on a target network would never be added to any loss)."""
    for part in parts:
        if not any(part == t or part.startswith(t + ".") for t in trained):
            raise ValueError(f"--{method.flag('parts')}={part}: a loss term acts on parameters "
                             f"that gradient steps train; give parts at or inside "
                             f"{', '.join(trained)}")


def make_plan(spec: str, settings: Mapping[str, Any], learner: Any,
              event_opt_state: str = "method") -> Plan:
    """Resolve an --intervention value against a learner; ValueError (one line, naming the
    flag) for a setting that cannot work. The parts are checked by `check_parts`.
    `event_opt_state` (EVENT_OPT_STATES) says what the event does to the optimizer state."""
    if event_opt_state not in EVENT_OPT_STATES:
        raise ValueError(f"--event_opt_state={event_opt_state!r} is not accepted; use one of: "
                         f"{', '.join(EVENT_OPT_STATES)}")
    bound = []
    for method in parse(spec):
        config = method.make_config(settings)
        parts = resolve_parts(method, config, learner)
        if method.kind == "loss":
            _check_trained(method, parts, tuple(learner.train_parts))
        bound.append(Bound(method, config, parts))
    per_step = [b for b in bound if b.method.kind != "event"]
    event = next((b for b in bound if b.method.kind == "event"), None)
    return Plan(tuple(bound), _hooks(per_step), event, event_opt_state)
