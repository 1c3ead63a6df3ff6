"""Sweeps through submitit: grids of jobs, their on-disk state, the job wrapper, submission.

Kept free of JAX imports: submitit unpickles `job.RunJob` in fresh processes that only run
the training script as a subprocess.
"""
