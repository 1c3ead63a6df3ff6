"""Run scripts, the training loop and what they share. Importing it changes nothing: each
entry point (the scripts here, the tests' conftest, the benchmarks) calls
`launch.startup.begin()` or `launch.xla_flags.apply_xla_flags()` before JAX starts."""
