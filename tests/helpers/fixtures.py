"""A fixture that several tests of a module read, made once for them all."""

import pytest


def shared_fixture(function=None, **kwargs):
    """`pytest.fixture(scope="module", **kwargs)` for something costly that several tests read
    (a finished run, a trained state): `group_shared_fixtures` runs its tests on one
    pytest-xdist worker, so that it is made once in the suite rather than once per worker."""

    def wrap(function):
        function.shared_by_tests = True
        return pytest.fixture(scope="module", **kwargs)(function)

    return wrap if function is None else wrap(function)


def is_shared(item, name: str) -> bool:
    """Whether the fixture `name` that `item` reads is a `shared_fixture`."""
    definitions = item._fixtureinfo.name2fixturedefs.get(name)
    return bool(definitions) and getattr(definitions[-1].func, "shared_by_tests", False)


def group_shared_fixtures(items) -> None:
    """Give each module's tests joined by the `shared_fixture`s (and their parameters) they
    read one xdist_group, which `--dist=loadgroup` runs on one worker (tests/conftest.py calls
    this as it collects). A test with an xdist_group of its own keeps it."""
    parent = {}  # (module, fixture, parameter index) -> another key of its group

    def root(key):
        while parent[key] != key:
            key = parent[key]
        return key

    tests = []
    for item in items:
        if item.get_closest_marker("xdist_group") or not hasattr(item, "_fixtureinfo"):
            continue
        callspec = getattr(item, "callspec", None)
        keys = [(item.module.__name__, name, callspec.indices.get(name) if callspec else None)
                for name in item.fixturenames if is_shared(item, name)]
        for key in keys:
            parent.setdefault(key, key)
            parent[root(key)] = root(keys[0])
        if keys:
            tests.append((item, keys[0]))
    for item, key in tests:
        module, name, index = root(key)
        item.add_marker(pytest.mark.xdist_group(
            f"{module}:{name}{'' if index is None else index}"))
