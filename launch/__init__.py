"""Run scripts, the training loop and what they share.

Importing this package sets the XLA options of `launch.xla_flags` (before JAX starts).
"""

from launch.xla_flags import apply_xla_flags

apply_xla_flags()
