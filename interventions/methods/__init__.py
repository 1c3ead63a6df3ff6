"""The built-in plasticity methods, one module each; `interventions.catalog` registers them."""
