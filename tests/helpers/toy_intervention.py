"""Two toy interventions registered from outside the package, as a user's plugin would be,
and a run script that registers them before it runs launch/run_sac.py:

    python tests/helpers/toy_intervention.py --env=... --intervention=toy_scale_bias+toy_clamp ...
"""

import dataclasses
import os
import runpy
import sys

import jax
import jax.numpy as jnp

from interventions import Method, Settings, register, setting
from interventions.parts import map_parts
from interventions.registry import parts_setting


@dataclasses.dataclass(frozen=True)
class ScaleBiasConfig(Settings):
    factor: float = setting(0.5, "Factor every bias is multiplied by.")
    parts: tuple[str, ...] = parts_setting("toy_scale_bias")

    def check(self):
        self.positive("factor")


def scale_biases(state, parts, cfg, ctx):
    """Every bias of the parts times `factor`."""
    def scale(params):
        return jax.tree_util.tree_map_with_path(
            lambda path, x: x * cfg.factor if getattr(path[-1], "key", None) == "bias" else x,
            params)
    return map_parts(state, parts, scale)


@dataclasses.dataclass(frozen=True)
class ClampConfig(Settings):
    bound: float = setting(0.05, "Largest absolute kernel entry after each gradient step.")
    parts: tuple[str, ...] = parts_setting("toy_clamp")


def clamp_kernels(params, aux, cfg):
    return jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.clip(x, -cfg.bound, cfg.bound)
        if getattr(path[-1], "key", None) == "kernel" else x, params)


SCALE_BIAS = Method(name="toy_scale_bias", kind="event", config=ScaleBiasConfig,
                    summary="Toy: scale every bias.", default_parts="param_parts",
                    apply=scale_biases)
CLAMP = Method(name="toy_clamp", kind="projection", config=ClampConfig,
               summary="Toy: clamp every kernel entry after each gradient step.",
               init=lambda params, cfg: jnp.zeros(()), project=clamp_kernels)


METHODS = (SCALE_BIAS, CLAMP)  # what --methods_from=tests.helpers.toy_intervention registers


def register_toys() -> None:
    from interventions import registered

    for method in (SCALE_BIAS, CLAMP):
        if method.name not in registered():
            register(method)


if __name__ == "__main__":
    register_toys()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "launch", "run_sac.py")
    sys.argv = [script, *sys.argv[1:]]
    runpy.run_path(script, run_name="__main__")
