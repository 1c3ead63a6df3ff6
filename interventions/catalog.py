"""The built-in interventions, registered in the order `--help` and the docs list them."""

from interventions.methods import (
    clip,
    dash,
    l2_init,
    layer_reset,
    nap,
    parseval,
    redo,
    reset,
    shrink_perturb,
    spectral_reg,
)
from interventions.registry import register

BUILTIN = (reset.METHOD, clip.METHOD, shrink_perturb.METHOD, nap.METHOD, spectral_reg.METHOD,
           dash.METHOD, redo.METHOD, l2_init.METHOD, parseval.METHOD, layer_reset.METHOD)

for _method in BUILTIN:
    register(_method)
