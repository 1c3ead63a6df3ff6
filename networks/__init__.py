"""Flax linen modules shared by the agents."""

from networks.bronet import BroActor, BroBlock, BroNet, OptimisticActor, QuantileCritic
from networks.common import MLP, default_init
from networks.critics import Critic, Ensemble
from networks.policies import TanhGaussianPolicy, tanh_gaussian_log_prob, tanh_gaussian_sample

__all__ = [
    "MLP",
    "BroActor",
    "BroBlock",
    "BroNet",
    "Critic",
    "Ensemble",
    "OptimisticActor",
    "QuantileCritic",
    "TanhGaussianPolicy",
    "default_init",
    "tanh_gaussian_log_prob",
    "tanh_gaussian_sample",
]
