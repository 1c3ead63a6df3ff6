"""The built-in interventions, registered in the order `--help` and the docs list them."""

from interventions.methods import clip, reset
from interventions.registry import register

BUILTIN = (reset.METHOD, clip.METHOD)

for _method in BUILTIN:
    register(_method)
