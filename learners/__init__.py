"""What every learner (the RL agents, the continual classifier) and the interventions share,
below both: the minibatch of transitions (`learners.batch`), the glue by which a learner's
update calls the interventions' per-step hooks (`learners.hooks`), the optimizer-holding
TrainState (`learners.train_state`) and the names of sown features (`learners.features`)."""
