"""The built-in interventions, registered in the order `--help` and the docs list them."""

from interventions.methods import clip, l2_init, nap, parseval, reset, shrink_perturb, spectral_reg
from interventions.registry import register

BUILTIN = (reset.METHOD, clip.METHOD, shrink_perturb.METHOD, nap.METHOD, spectral_reg.METHOD,
           l2_init.METHOD, parseval.METHOD)

for _method in BUILTIN:
    register(_method)
