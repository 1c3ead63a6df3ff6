"""Names under which networks sow their hidden features for the diagnostics and interventions."""

# The name a network records a residual stream under (BRO's block outputs, `x + LN(...)`, with
# no activation after the sum): srank applies to it, dormant ratios, defined on activations
# (Sokar et al. 2023: a unit's mean |output| after its activation), do not
# (interventions/diagnostics.py, interventions/units.py).
RESIDUAL = "residual"
