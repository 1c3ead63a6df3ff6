"""Numerics below the networks and the interventions: LAPACK on stacks of weight matrices
(`numerics.linalg`) and random draws that compile fast (`numerics.rng`). Imports nothing of the
project."""
