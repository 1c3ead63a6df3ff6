"""The built-in interventions, registered in the order `--help` and the docs list them."""

from interventions.methods import clip, dash, layer_reset, redo, reset
from interventions.registry import register

BUILTIN = (reset.METHOD, clip.METHOD, redo.METHOD, dash.METHOD, layer_reset.METHOD)

for _method in BUILTIN:
    register(_method)
