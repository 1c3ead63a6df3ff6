"""How a learner's update calls the interventions' per-step hooks (`interventions.Hooks`): the
loss terms added to a network's loss, and the projections after each gradient step."""

from collections.abc import Callable


def penalized(loss_fn: Callable, hooks, path: str, plasticity) -> Callable:
    """`loss_fn: params -> (loss, aux)` with the intervention hooks' loss terms for the network
    whose parameters are at state path `path` added: `params -> (loss + penalty, (aux, loss,
    penalty))`; penalty is None (and the loss as it was) where `hooks` has no loss terms."""

    def fn(params):
        loss, aux = loss_fn(params)
        if hooks is None or hooks.penalty is None:
            return loss, (aux, loss, None)
        penalty = hooks.penalty(path, params, plasticity)
        return loss + penalty, (aux, loss, penalty)

    return fn


def with_penalty(info: dict, name: str, penalty) -> dict:
    """Metrics `info` with `<name>_penalty` added where a loss term was applied."""
    return info if penalty is None else {**info, f"{name}_penalty": penalty}


def after_step(state, hooks):
    """The hooks' per-step projections and state updates after one gradient step, if any."""
    if hooks is None or hooks.after_step is None:
        return state
    return hooks.after_step(state)
