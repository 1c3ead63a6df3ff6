"""DeepMind Control suite task names ("domain-task"): listing, validation, closest matches."""

import difflib
import functools
import logging
import os
from types import ModuleType

from absl import logging as absl_logging

SEPARATOR = "-"


class UnknownEnvError(ValueError):
    """A name that is no dm_control suite task; the message is one line with the closest match."""


BUNDLED_MODEL_WARNINGS = (
    # MuJoCo 3.17 deprecates an attribute that dm_control 1.0.50's own cheetah.xml uses: logged
    # at every cheetah env's load (train and eval), about a file no user of the suite edits.
    "compiler attribute 'settotalmass' is deprecated",
)


def _not_about_bundled_models(record: logging.LogRecord) -> bool:
    """A logging filter: False for MuJoCo's warnings about dm_control's bundled model files."""
    return not any(text in record.getMessage() for text in BUNDLED_MODEL_WARNINGS)


def dm_suite() -> ModuleType:
    """Import `dm_control.suite` headless: MUJOCO_GL defaults to 'disabled' (nothing renders).
    MuJoCo's warnings about the suite's own model files (BUNDLED_MODEL_WARNINGS), which
    dm_control logs through absl, are left out; every other warning stays."""
    os.environ.setdefault("MUJOCO_GL", "disabled")
    from dm_control import suite

    absl_logger = absl_logging.get_absl_logger()
    if _not_about_bundled_models not in absl_logger.filters:
        absl_logger.addFilter(_not_about_bundled_models)
    return suite


@functools.cache
def _tasks_by_domain() -> dict[str, tuple[str, ...]]:
    tasks: dict[str, tuple[str, ...]] = {}
    for domain, task in dm_suite().ALL_TASKS:
        tasks[domain] = (*tasks.get(domain, ()), task)
    return tasks


def known_envs() -> list[str]:
    """Every dm_control suite task as "domain-task", sorted."""
    return sorted(
        f"{domain}{SEPARATOR}{task}"
        for domain, tasks in _tasks_by_domain().items()
        for task in tasks
    )


def _known_domain(name: str) -> str | None:
    """The suite's spelling of `name`'s domain part when it is a known domain (any case)."""
    domain = name.strip().partition(SEPARATOR)[0].lower()
    return {d.lower(): d for d in _tasks_by_domain()}.get(domain)


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()


def suggest(name: str, n: int = 3) -> list[str]:
    """Up to `n` known names closest to `name`, best first (case-insensitive difflib ratio).

    When the domain is right and the task is not: every task of that domain, closest first.
    """
    domain = _known_domain(name)
    if domain is not None:
        task = name.strip().partition(SEPARATOR)[2]
        ranked = sorted(_tasks_by_domain()[domain], key=lambda t: -_similarity(task, t))
        return [f"{domain}{SEPARATOR}{t}" for t in ranked]
    by_lower = {known.lower(): known for known in known_envs()}
    close = difflib.get_close_matches(name.strip().lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in close]


def unknown_env_message(name: str) -> str:
    """One line: the unknown name, the closest match, the domain's other tasks, all known names."""
    suggestions = suggest(name)
    message = f"unknown env {name!r};"
    if suggestions:
        message += f" did you mean {suggestions[0]!r}?"
    domain = _known_domain(name)
    if domain is not None and len(suggestions) > 1:
        message += f" other {domain} tasks: {', '.join(suggestions[1:])};"
    return f"{message} known: {', '.join(known_envs())}"


def check_env_name(name: str) -> tuple[str, str]:
    """(domain, task) of a known "domain-task" name; raises UnknownEnvError. Loads no physics."""
    if not isinstance(name, str):
        raise UnknownEnvError(f"env name must be a 'domain-task' string, got {name!r}")
    domain, _, task = name.partition(SEPARATOR)
    if task not in _tasks_by_domain().get(domain, ()):
        raise UnknownEnvError(unknown_env_message(name))
    return domain, task
