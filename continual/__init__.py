"""Continual supervised benchmarks (docs/algorithms.md): task sequences, data loaders, a
classifier learner
and the loop that trains it task by task, with the interventions of the registry.

    data      loaders of MNIST, CIFAR-10, downsampled ImageNet and scikit-learn's digits
    tasks     the benchmarks' protocols and task sequences (permuted, random labels, class pairs)
    learner   the classifier's state, update and the Learner the interventions act on
    config    a run's settings and flags
    loop      the training loop: one compiled call per task, events at task boundaries
"""
