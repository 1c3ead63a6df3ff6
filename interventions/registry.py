"""The registry of plasticity interventions: one `Method` entry per method, by name.

An entry has a name, a frozen config dataclass (its settings: defaults, validation in
`__post_init__`, one help text per field) and what it does, in one of three kinds:

- "event": `apply(state, parts, cfg, ctx) -> state` at scheduled steps, on one seed's learner
  state (the caller vmaps it over seeds); `ctx` (an `EventContext`) holds what `needs` asks for.

Any method may give `validate(state, parts, cfg, learner)`, which refuses (ValueError, one line
naming the flag) parts it cannot act on when the run starts, before anything is compiled.
- "projection": after every gradient step, `project(params, aux, cfg) -> params` on each part,
  with `aux = init(params, cfg)` taken when the learner is initialised (e.g. initial norms).
- "loss": `penalty(params, aux, cfg) -> scalar` added to the loss of each part's network inside
  the update; `update_aux(params, aux, cfg) -> aux` after every gradient step (optional).

Adding an intervention is one module plus one registry entry (a `register(Method(...))` call,
or a line in `interventions/catalog.py` for the built-in ones). Nothing here knows about SAC,
BRO or the continual learner; a learner describes itself through the `Learner` protocol.
"""

import dataclasses
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

PyTree = Any
KINDS = ("event", "projection", "loss")
NONE = "none"
# Which of a learner's part lists a method acts on unless its `parts` setting names others.
PART_LISTS = ("param_parts", "train_parts", "reset_parts")
# What an event may ask the caller for (EventContext fields).
NEEDS = ("key", "initial", "fresh", "reinit", "data")
SCHEDULE_UNITS = ("env_steps", "grad_steps")
SEPARATORS = ("+", ",")  # "nap+clip" (sweep grids) or "nap,clip" (--intervention)


class SettingError(ValueError):
    """A method setting that cannot work: `field` names it, the message says what is accepted."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def setting(default: Any, help: str, choices: tuple | None = None,
            read_when: tuple[str, Any] | None = None, label: str | None = None) -> Any:
    """A config dataclass field with its help text, the accepted values of a string,
    `read_when=(other field, value)` for a setting read only when another has that value, and
    the `label` a sweep's run names give its values (clip's c: clip-c2-seed0; None: its flag,
    clip-clip_sides=upper-seed0)."""
    metadata = {"help": help, "choices": choices, "read_when": read_when, "label": label}
    if isinstance(default, list | dict):
        raise TypeError("settings are immutable: use a tuple")
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Base of a method's config: checks each string setting against its choices, then the
    subclass's `check()` (raise SettingError naming the field)."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            choices = field.metadata.get("choices")
            value = getattr(self, field.name)
            if choices and value not in choices:
                raise SettingError(field.name, f"{field.name}={value!r} is not accepted; use one "
                                   f"of: {', '.join(map(str, choices))}")
        self.check()

    def check(self) -> None:
        """Raise SettingError for a value that cannot work."""

    def positive(self, *names: str) -> None:
        """SettingError for the first of `names` that is not a finite number > 0."""
        for name in names:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise SettingError(name, f"{name} must be a finite number > 0, got {value}")

    def in_range(self, name: str, low: float, high: float) -> None:
        """SettingError unless low <= the setting <= high."""
        value = getattr(self, name)
        if not (isinstance(value, int | float) and low <= value <= high):
            raise SettingError(name, f"{name} must be in [{low:g}, {high:g}], got {value}")


def parts_setting(what: str) -> Any:
    """The `parts` field every method config has: state paths to act on, () for the default."""
    return setting((), f"State paths {what} acts on (e.g. actor.params); empty: the learner's "
                   "default parts for it.")


class EventContext(NamedTuple):
    """What an event reads besides the state; what its `needs` leaves out is None.

    key: a PRNG key of its own. initial: the learner state the run started from. fresh: a
    learner state initialised anew (a new key). reinit: what a reset of this learner goes back
    to (`fresh` or `initial`, as the learner's `reset_to` says). data: (n, batch, ...)
    minibatches of the learner's data (replay transitions, the task's examples). learner: the
    `Learner`.
    """

    key: Any = None
    initial: PyTree = None
    fresh: PyTree = None
    reinit: PyTree = None
    data: PyTree = None
    learner: Any = None


class Learner(Protocol):
    """What interventions may know of a learner (an RL agent, the continual learner)."""

    networks: Mapping[str, str]  # network name -> the state path of its parameters
    param_parts: tuple[str, ...]  # every network's parameters, targets included
    train_parts: tuple[str, ...]  # the parameters trained by gradient steps
    reset_parts: tuple[str, ...]  # what a reset re-initialises (parameters, optimizers, scalars)
    reset_to: str  # "fresh" (new weights) or "initial" (the run's first weights)

    def features(self, state: PyTree, batch: PyTree) -> dict: ...  # {network: {layer: (.., b, u)}}

    def loss_grads(self, state: PyTree, batch: PyTree, key: Any) -> dict: ...  # {path: grads}


@dataclasses.dataclass(frozen=True)
class Method:
    """One registry entry. `prefix` names its flags (`--<prefix>_<field>`, default: the name)."""

    name: str
    kind: str
    config: type
    summary: str
    default_parts: str = "train_parts"
    prefix: str = ""
    # event
    apply: Callable | None = None  # (state, parts, cfg, ctx) -> state
    needs: tuple[str, ...] = ()
    # cfg -> the part of `needs` these settings read (None: all of it); what is left out is
    # not computed for the event (e.g. a fresh init that Gaussian noise does not use)
    needs_for: Callable | None = None
    data_shape: Callable | None = None  # cfg -> (batches, batch_size) of ctx.data
    # cfg -> a non-decreasing map s -> s' that the event applies to the singular values of
    # every weight matrix it changes (clip by SVD), or None; the per-layer report then takes
    # cond_after from the singular values before the event instead of a second SVD
    spectral_map: Callable | None = None
    every: tuple[int, str] | None = None  # own default period; None: the learner's resets'
    params_only: bool = True  # parts must hold parameters, not optimizer states
    # (state, parts, cfg, learner) -> None: ValueError (one line) for parts it cannot act on;
    # state may be abstract (shapes only), learner may be None
    validate: Callable | None = None
    # projection and loss
    init: Callable | None = None  # (params, cfg) -> aux
    project: Callable | None = None  # (params, aux, cfg) -> params
    penalty: Callable | None = None  # (params, aux, cfg) -> scalar
    update_aux: Callable | None = None  # (params, aux, cfg) -> aux

    def __post_init__(self):
        if not self.prefix:
            object.__setattr__(self, "prefix", self.name)
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name!r}: kind must be one of {KINDS}, got "
                             f"{self.kind!r}")
        if self.default_parts not in PART_LISTS:
            raise ValueError(f"method {self.name!r}: default_parts must be one of {PART_LISTS}")
        if not dataclasses.is_dataclass(self.config) or "parts" not in self.field_names:
            raise ValueError(f"method {self.name!r}: config must be a dataclass with a `parts` "
                             "field")
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"method {self.name!r}: unknown needs {sorted(unknown)}; known: "
                             f"{NEEDS}")
        needed = {"event": ("apply",), "projection": ("init", "project"),
                  "loss": ("init", "penalty")}[self.kind]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"method {self.name!r} of kind {self.kind} needs {missing}")
        if ("data" in self.needs) != (self.data_shape is not None):
            raise ValueError(f"method {self.name!r}: give data_shape exactly when it needs data")

    def needs_of(self, cfg: Any) -> tuple[str, ...]:
        """What the event reads with settings `cfg`: `needs`, narrowed by `needs_for`."""
        if self.needs_for is None:
            return self.needs
        narrowed = tuple(self.needs_for(cfg))
        if not set(narrowed) <= set(self.needs):
            raise ValueError(f"method {self.name!r}: needs_for gave {sorted(narrowed)}, beyond "
                             f"its needs {sorted(self.needs)}")
        return narrowed

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.config))

    def flag(self, field: str) -> str:
        """The flag name of a config field: `<prefix>_<field>`."""
        return f"{self.prefix}_{field}"

    def settings(self) -> dict[str, tuple[dataclasses.Field, type]]:
        """{flag name: (field, its type)} of this method's config."""
        hints = typing.get_type_hints(self.config)
        return {self.flag(f.name): (f, hints[f.name]) for f in dataclasses.fields(self.config)}

    def make_config(self, values: Mapping[str, Any]) -> Any:
        """The config from {flag name: value} (missing ones at their defaults); a SettingError
        names the flag of a value that cannot work."""
        mine = {f.name: values[self.flag(f.name)] for f in dataclasses.fields(self.config)
                if self.flag(f.name) in values}
        try:
            return self.config(**mine)
        except SettingError as e:
            flag, message = self.flag(e.field), str(e)
            named = message[len(e.field):] if message.startswith(e.field) else f": {message}"
            raise SettingError(flag, f"{flag}{named}") from None


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add a method; its name and flag names must be new."""
    if method.name == NONE or method.name in _REGISTRY:
        raise ValueError(f"an intervention named {method.name!r} is registered already")
    if any(sep in method.name for sep in SEPARATORS):
        raise ValueError(f"intervention names cannot hold {SEPARATORS}: {method.name!r}")
    taken = {flag for other in _REGISTRY.values() for flag in other.settings()}
    clash = sorted(set(method.settings()) & taken)
    if clash:
        raise ValueError(f"method {method.name!r}: flags {clash} belong to another method")
    _REGISTRY[method.name] = method
    return method


def load_module(name: str) -> list[Method]:
    """Import the module `name` (a user's method outside this package, e.g. `my_pkg.my_method`)
    and register its `METHOD` and `METHODS` that are not registered yet; ValueError (one line)
    when it cannot be imported or defines neither."""
    import importlib

    try:
        module = importlib.import_module(name)
    except Exception as e:  # whatever its import raises, the user's line names it
        raise ValueError(f"cannot import {name} ({type(e).__name__}: {e}); it must be importable "
                         "from here (installed, or on PYTHONPATH)") from None
    methods = [m for m in (getattr(module, "METHOD", None), *getattr(module, "METHODS", ()))
               if m is not None]
    if not methods or not all(isinstance(m, Method) for m in methods):
        raise ValueError(f"{name} defines no METHOD (an interventions.Method) or METHODS (a tuple "
                         "of them) to register")
    for method in methods:
        if _REGISTRY.get(method.name) is not method:
            register(method)
    return methods


def registered() -> dict[str, Method]:
    """Every registered method by name, in registration order."""
    return dict(_REGISTRY)


def get(name: str) -> Method:
    if name not in _REGISTRY:
        raise ValueError(f"unknown intervention {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name]


def names() -> tuple[str, ...]:
    """Every accepted single --intervention value, "none" first."""
    return (NONE, *_REGISTRY)


def split(spec: str) -> tuple[str, ...]:
    """The methods of an --intervention value ("nap,clip", "nap+clip", "clip", "none")."""
    text = spec.replace(",", "+")
    return tuple(part.strip() for part in text.split("+") if part.strip())


def parse(spec: str) -> tuple[Method, ...]:
    """The methods of an --intervention value, validated as a combination: names known, none
    repeated, at most one event (events share the one schedule), "none" alone. ValueError with
    one line otherwise."""
    chosen = split(spec)
    if not chosen:
        raise ValueError(f"no intervention given; accepted: {', '.join(names())}, or several "
                         "joined by '+' or ','")
    if NONE in chosen:
        if len(chosen) > 1:
            raise ValueError(f"'none' cannot be combined with other interventions, got {spec!r}")
        return ()
    unknown = [name for name in chosen if name not in _REGISTRY]
    if unknown:
        raise ValueError(f"unknown intervention {unknown[0]!r}; accepted: {', '.join(names())}, "
                         "or several joined by '+' or ','")
    repeated = sorted({name for name in chosen if chosen.count(name) > 1})
    if repeated:
        raise ValueError(f"intervention {repeated[0]!r} is given twice in {spec!r}; give each once")
    events = [name for name in chosen if _REGISTRY[name].kind == "event"]
    if len(events) > 1:
        raise ValueError(f"{' and '.join(events)} are both events at scheduled steps, which share "
                         "one schedule; combine at most one event with per-step methods ("
                         + ", ".join(n for n, m in _REGISTRY.items() if m.kind != "event") + ")")
    return tuple(_REGISTRY[name] for name in chosen)


def canonical(spec: str) -> str:
    """The spelling a run records: methods joined by '+' in the order given, or 'none'."""
    chosen = parse(spec)
    return "+".join(m.name for m in chosen) if chosen else NONE


def event_of(spec: str) -> Method | None:
    """The event method of an --intervention value, or None."""
    return next((m for m in parse(spec) if m.kind == "event"), None)


def all_settings() -> dict[str, tuple[Method, dataclasses.Field, type]]:
    """{flag name: (method, field, type)} of every registered method."""
    return {flag: (m, field, kind) for m in _REGISTRY.values()
            for flag, (field, kind) in m.settings().items()}


def run_label(flag: str) -> str | None:
    """The short label a method gives a setting in run names (`setting(label=)`), or None."""
    entry = all_settings().get(flag)
    return entry[1].metadata.get("label") if entry else None


def check_value(flag: str, value: Any) -> None:
    """SettingError (naming the flag) when a method's setting cannot take `value`, as its
    config's own checks say; nothing for a flag of no method."""
    method = owner(flag)
    if method is not None:
        method.make_config({flag: value})


def owner(flag: str) -> Method | None:
    """The method a setting (flag name) belongs to, or None for a setting of no method."""
    entry = all_settings().get(flag)
    return entry[0] if entry else None
