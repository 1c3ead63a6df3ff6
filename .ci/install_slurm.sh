#!/usr/bin/env bash
# Install Debian's single-node SLURM (slurmctld, slurmd, client tools) and munge for the sweep's
# SLURM test. Never fails: where the packages cannot be installed it says so and exits 0, and
# tests/test_sweep_slurm.py then skips with its reason.
set -u

if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    && command -v sbatch >/dev/null; then
    echo "install_slurm: slurmctld, slurmd, sbatch and munged already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install_slurm: apt-get not found; SLURM not installed, the SLURM sweep test will skip"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "install_slurm: not root and no passwordless sudo; SLURM not installed, test will skip"
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get update -qq; then
    echo "install_slurm: apt-get update failed; SLURM not installed, the SLURM sweep test will skip"
    exit 0
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge; then
    echo "install_slurm: apt-get install failed; SLURM not installed, the SLURM sweep test will skip"
    exit 0
fi
echo "install_slurm: installed $(slurmctld -V 2>/dev/null) and $(munged -V 2>/dev/null | head -n 1)"
