"""experiment/rundir/code.py: the commit a run records, "+changes" for edited tracked files, and
"unknown" where the code is not the top of a git checkout."""

import re
import subprocess

import pytest

from experiment.rundir.code import CODE, UNKNOWN, code_version, other_code, recorded_code
from experiment.rundir.record import versions


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    try:
        git(tmp_path, "init", "-q")
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"git cannot be run here: {error}")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "results.csv").write_text("r\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def test_a_clean_checkout_is_its_commit_and_an_edit_adds_changes(checkout):
    head = git(checkout, "rev-parse", "HEAD")[:12]
    assert code_version(str(checkout)) == head
    (checkout / "new.py").write_text("untracked\n")  # untracked files are not the code's
    assert code_version(str(checkout)) == head
    (checkout / "results.csv").write_text("r\nmore\n")
    assert code_version(str(checkout)) == head + "+changes"
    assert code_version(str(checkout), exclude=["results.csv"]) == head
    (checkout / "a.py").write_text("x = 2\n")
    assert code_version(str(checkout), exclude=["results.csv"]) == head + "+changes"


def test_a_folder_inside_another_checkout_or_none_is_unknown(checkout, tmp_path_factory):
    inside = checkout / "installed"  # e.g. a copy installed into a virtualenv in a repository
    inside.mkdir()
    assert code_version(str(inside)) == UNKNOWN
    assert code_version(str(tmp_path_factory.mktemp("plain"))) == UNKNOWN


def test_runs_record_this_checkouts_code():
    assert versions()["code"] == CODE
    assert re.fullmatch(r"[0-9a-f]{12}(\+changes)?|unknown", CODE)


def test_only_two_known_different_versions_are_other_code():
    assert other_code("0123456789ab", "ba9876543210")
    assert other_code("0123456789ab+changes", "0123456789ab")
    assert not other_code("0123456789ab", "0123456789ab")
    assert not other_code(None, "0123456789ab")  # recorded before runs kept their code
    assert not other_code(UNKNOWN, "0123456789ab")
    assert not other_code("0123456789ab", UNKNOWN)


def test_the_recorded_code_is_read_from_versions_or_is_none():
    assert recorded_code({"versions": {"jax": "0.10.2", "code": "0123456789ab"}}) == "0123456789ab"
    assert recorded_code({"versions": {"jax": "0.10.2"}}) is None
    assert recorded_code({"versions": "damaged"}) is None and recorded_code([]) is None
