"""What the tests share: running the launch scripts as a user types them (runs.py), killing one
mid-checkpoint (killsave.py), bit-identity of pytrees (trees.py), small batches, plans and
learners, files in the data formats users have, readers of dashboard files, stand-ins for run
scripts and SLURM, and a toy plugin intervention."""
