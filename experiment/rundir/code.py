"""Which code a run or a benchmark ran: the project checkout's commit, "+changes" when tracked
files differ from it. config.json records it (`versions.code`), so a resume with other code
says so, a sweep names the finished runs it keeps from other code, and aggregation can split
runs by it (`--group_by=versions.code`). Imports nothing of the project and no JAX."""

import os
import subprocess
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNKNOWN = "unknown"


def code_version(root: str = ROOT, exclude: Sequence[str] = ()) -> str:
    """The commit of the git checkout at `root` (12 hex digits), with "+changes" when tracked
    files other than `exclude` (paths relative to `root`) differ from it; "unknown" when
    `root` is not the top of a git checkout (an installed copy inside another repository
    included) or git cannot be run."""
    def git(*args: str) -> str:
        # --no-optional-locks: a status writes nothing (many jobs may start at once)
        return subprocess.run(["git", "--no-optional-locks", "-C", root, *args],
                              capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        if os.path.realpath(git("rev-parse", "--show-toplevel")) != os.path.realpath(root):
            return UNKNOWN
        head = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                      *(f":(exclude){path}" for path in exclude))
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return head + ("+changes" if changed else "")


CODE = code_version()  # as the process's code read when it started: a checkout may move on


def recorded_code(config: object) -> str | None:
    """The code a run's config.json records (versions.code); None where it records none (a
    run from before runs recorded it)."""
    versions = config.get("versions") if isinstance(config, dict) else None
    code = versions.get("code") if isinstance(versions, dict) else None
    return code if isinstance(code, str) else None


def other_code(recorded: object, now: str = CODE) -> bool:
    """Whether a run recorded with code version `recorded` (config.json's versions.code; None
    for a run recorded before it was kept) is known to have run other code than `now`: False
    when either side is unknown."""
    return (isinstance(recorded, str) and recorded != UNKNOWN and now != UNKNOWN
            and recorded != now)
