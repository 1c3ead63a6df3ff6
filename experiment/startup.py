"""What each script of `launch/` does first, before it imports JAX (`begin()`): set the XLA
options of `experiment.xla_flags` and one OpenBLAS thread for LAPACK, and, when that script is the
program (`python launch/run_sac.py ...`; not when a test or a notebook imports it as a module),
hold a Ctrl-C that comes while the libraries are imported until the script's main is ready for
it; one that Python drops later is raised in the training loop (`experiment.ctrl_c`)."""

import os
import sys

from experiment import ctrl_c
from experiment.xla_flags import apply_xla_flags

SCRIPTS = ("run_sac.py", "run_bro.py", "sweep.py", "aggregate.py", "plot_run.py",
           "run_continual.py", "aggregate_continual.py", "compare_continual.py",
           "condition_numbers.py", "anisotropic_init.py")


def one_blas_thread(environ=os.environ) -> None:
    """One OpenBLAS thread for LAPACK unless the user set OPENBLAS_NUM_THREADS; before numpy or
    scipy loads OpenBLAS. The SVDs, eigendecompositions and QRs of clip, resets and the
    diagnostics go through scipy's OpenBLAS, whose threads spin against XLA's for the cores
    (many times slower under load: `python benchmarks/clip.py` times the clip's LAPACK calls),
    and only with one do the LAPACK calls of numerics.linalg.unrolled run side by side."""
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def begin() -> None:
    """XLA's options and one OpenBLAS thread, then the Ctrl-C hold of a script run as the
    program, and the methods of its --methods_from modules registered before its flags are
    defined."""
    apply_xla_flags()
    one_blas_thread()
    program = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if os.path.basename(program) in SCRIPTS:
        ctrl_c.hold()
        load_methods_from(sys.argv[1:])


def methods_from(argv: list[str]) -> list[str]:
    """The modules of --methods_from=a,b (or --methods_from a,b) among the arguments, as absl
    reads them (up to a lone `--`)."""
    names = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("--methods_from="):
            names += arg.split("=", 1)[1].split(",")
        elif arg == "--methods_from" and i + 1 < len(argv):
            names += argv[i + 1].split(",")
    return [name.strip() for name in names if name.strip()]


def load_methods_from(argv: list[str]) -> None:
    """Register the methods of each --methods_from module (interventions.registry.load_module)
    before the script defines its flags, so they take --intervention and --<prefix>_* flags
    like the built-in ones; a module that cannot be loaded is one `error:` line, exit code 2."""
    names = methods_from(argv)
    if not names:
        return
    from interventions import registry

    for name in names:
        try:
            registry.load_module(name)
        except ValueError as e:
            print(f"error: --methods_from={name}: {e}", file=sys.stderr)
            sys.exit(2)
