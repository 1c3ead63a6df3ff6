"""A fixture that several tests of a module read, made once for them all."""

import pytest


def shared_fixture(function=None, **kwargs):
    """`pytest.fixture(scope="module", **kwargs)` for something costly that several tests read
    (a finished run, a trained state): tests/conftest.py runs its tests on one pytest-xdist
    worker, so that it is made once in the suite rather than once per worker."""

    def wrap(function):
        function.shared_by_tests = True
        return pytest.fixture(scope="module", **kwargs)(function)

    return wrap if function is None else wrap(function)
