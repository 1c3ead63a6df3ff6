"""Run scripts, the training loop and what they share. Importing it changes nothing: each
entry point (the scripts here, the tests' conftest, the benchmarks) calls
`experiment.startup.begin()` or `experiment.xla_flags.apply_xla_flags()` before JAX starts."""
