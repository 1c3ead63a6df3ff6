"""The anisotropic-initialisation experiment (docs/continual.md): the steps a network needs
to fit a fixed subset of a stationary task, as a function of d, the number of unit singular
values of its weights at initialisation.

    python launch/anisotropic_init.py --data=digits --ds=1,2,4,8,16,32,64 --seeds=5

Every weight matrix W (m x n, k = min(m, n) singular values) of the continual MLP starts as
U diag(s) V^T, with U and V the singular vectors of its default (orthogonal) initialisation,
s = 1 for min(d, k) of them and --small (1e-5) for the rest, rescaled to the Frobenius norm of
that default initialisation. The network then trains (Adam, the continual learner's update) on
--examples images with their true labels until its accuracy on all of them reaches --target;
its steps (counted every --eval_every) go to anisotropy.csv (d, seed, steps, reached) and
anisotropy.png (steps against d: each seed, and the mean), under --out.
"""

import csv
import sys
from pathlib import Path

from experiment import startup

startup.begin()  # before JAX: XLA's options, a Ctrl-C held while the libraries import

# isort: split
import numpy as np
from absl import app, flags, logging

from continual.anisotropy import steps_to_fit
from continual.data import LOADERS, DataError
from continual.learner import DEFAULT_LEARNING_RATE, LearnerConfig
from experiment.cli import one_line_flag_parser

FLAGS = flags.FLAGS
flags.DEFINE_enum("data", "digits", ["digits", "mnist"], "The stationary task's images.")
flags.DEFINE_string("data_dir", "data", "Folder holding mnist/ (for --data=mnist).")
flags.DEFINE_integer("examples", 256, "Images of the fixed subset (true labels).")
flags.DEFINE_integer("batch_size", 32, "Minibatch size (a new shuffle every epoch).")
flags.DEFINE_integer("hidden_dim", 256, "Width of the MLP's hidden layer.")
flags.DEFINE_boolean("layer_norm", True, "LayerNorm after the hidden Dense.")
flags.DEFINE_float("learning_rate", DEFAULT_LEARNING_RATE, "Adam's learning rate.")
flags.DEFINE_list("ds", ["1", "2", "4", "8", "16", "32", "64"], "Numbers of unit singular "
                  "values at initialisation (capped at each matrix's own count).")
flags.DEFINE_float("small", 1e-5, "The other singular values (before the rescaling).")
flags.DEFINE_float("target", 0.99, "Accuracy on the subset that counts as fitted.")
flags.DEFINE_integer("max_steps", 5_000, "Steps after which a seed counts as not fitted.")
flags.DEFINE_integer("eval_every", 10, "Steps between evaluations of the accuracy.")
flags.DEFINE_integer("seeds", 5, "Seeds per d (vmapped).")
flags.DEFINE_string("out", "anisotropy", "Output directory.")


class Error(ValueError):
    """A setting that cannot work; one line for the user."""


def run() -> None:
    try:
        ds = [int(d) for d in FLAGS.ds]
    except ValueError:
        raise Error(f"--ds must be comma-separated integers, got {','.join(FLAGS.ds)}") from None
    for name in ("examples", "batch_size", "hidden_dim", "max_steps", "eval_every", "seeds"):
        if getattr(FLAGS, name) <= 0:
            raise Error(f"--{name} must be positive, got {getattr(FLAGS, name)}")
    if not ds or min(ds) < 1:
        raise Error(f"--ds must be integers >= 1, got {FLAGS.ds}")
    if not 0 < FLAGS.target <= 1 or not 0 < FLAGS.small < 1:
        raise Error("--target must be in (0, 1] and --small in (0, 1)")
    data = LOADERS[FLAGS.data](FLAGS.data_dir)
    if FLAGS.examples > len(data.labels):
        raise Error(f"--examples={FLAGS.examples} is more than the {len(data.labels)} images")
    rows = np.random.default_rng(0).choice(len(data.labels), FLAGS.examples, replace=False)
    images = data.images[rows].reshape(FLAGS.examples, -1).astype(np.float32) * data.scale
    labels = data.labels[rows]
    out = Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    config = LearnerConfig(input_shape=images.shape[1:], hidden_dims=(FLAGS.hidden_dim,),
                           layer_norm=FLAGS.layer_norm, learning_rate=FLAGS.learning_rate)
    results = []
    for d in ds:
        steps, reached = steps_to_fit(
            images, labels, d, config, seeds=FLAGS.seeds, small=FLAGS.small, target=FLAGS.target,
            max_steps=FLAGS.max_steps, eval_every=FLAGS.eval_every, batch_size=FLAGS.batch_size)
        results += [(d, s, int(t), bool(r)) for s, (t, r) in enumerate(zip(steps, reached,
                                                                             strict=True))]
        print(f"d={d}: steps to {FLAGS.target:g} accuracy {steps.tolist()}"
              + ("" if reached.all() else f" ({int((~reached).sum())} not fitted by "
                 f"{FLAGS.max_steps})"), file=sys.stderr)
    with open(out / "anisotropy.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["d", "seed", "steps", "reached"])
        writer.writerows(results)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    table = np.array([(d, t) for d, _, t, _ in results], float)
    ax.scatter(table[:, 0], table[:, 1], s=10, alpha=0.5, color="gray", label="seeds")
    ax.plot(ds, [table[table[:, 0] == d, 1].mean() for d in ds], "o-", label="mean")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d (unit singular values at initialisation)")
    ax.set_ylabel(f"steps to {FLAGS.target:g} train accuracy")
    ax.set_title(f"{FLAGS.data}, {FLAGS.examples} images, {FLAGS.seeds} seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "anisotropy.png", dpi=120)
    plt.close(fig)
    print(f"written to {out}/anisotropy.csv and anisotropy.png", file=sys.stderr)


def main(argv: list[str]) -> None:
    logging.set_verbosity(logging.WARNING)
    try:
        if len(argv) > 1:
            raise Error(f"unexpected arguments {argv[1:]}; every setting is a --flag")
        run()
    except (Error, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    app.run(main, flags_parser=one_line_flag_parser())

