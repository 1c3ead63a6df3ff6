"""A clone holds everything the repository refers to: no file points at a path outside it (the
published curves are in reference/, the algorithms' description in docs/algorithms.md)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A sibling folder of the checkout, written as a path or joined from Python names.
OUTSIDE = re.compile(r"\.\./shared|shared/(?:reference|docs)|[\"']shared[\"']\s*/")


def repository_files() -> list[Path]:
    """The tracked files and the untracked ones git does not ignore, as they are on disk."""
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.decode(errors='replace').strip()}")
    names = [n for n in proc.stdout.decode().split("\0") if n]
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def test_no_file_refers_to_a_path_outside_the_repository():
    hits = []
    for path in repository_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # figures and arrays
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "files refer to paths outside the repository:\n" + "\n".join(hits)


def test_the_pattern_finds_what_it_is_for():
    up = "../" + "shared"  # built, so this file holds no such path itself
    for line in (f"R={up}/reference", f"`{up}/docs/SPEC.md`",
                 "/work/shared/reference/bro_dmc", 'Path(REPO).parent / "shared" / "reference"'):
        assert OUTSIDE.search(line), line
    for line in ("R=reference", "docs/algorithms.md", "shared_axis = 0", "shared by all seeds"):
        assert not OUTSIDE.search(line), line
