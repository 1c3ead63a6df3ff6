"""tests/helpers/fixtures.py: a shared_fixture is made once however many workers run the suite."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.runs import REPO

CONFTEST = """
import pytest
from tests.helpers.fixtures import group_shared_fixtures

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    group_shared_fixtures(items)
"""

TESTS = """
import os
import pytest
from tests.helpers.fixtures import shared_fixture

@shared_fixture
def made():
    with open("made.txt", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    return 1

@pytest.fixture(scope="module")
def plain():
    return 0

@pytest.mark.parametrize("i", range(8))
def test_reads_it(made, plain, i):
    assert made == 1

@pytest.mark.parametrize("i", range(8))
def test_reads_nothing_shared(plain, i):
    assert plain == 0
"""


@pytest.mark.slow
def test_a_shared_fixture_is_made_once_on_two_workers(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared.py").write_text(textwrap.dedent(TESTS))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist=loadgroup",
         "-p", "no:cacheprovider", "-p", "no:randomly", "test_shared.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": REPO})
    assert "16 passed" in proc.stdout, proc.stdout + proc.stderr
    made = (tmp_path / "made.txt").read_text().split("\n")[:-1]
    assert len(made) == 1, made  # without the groups, each worker makes it
