"""Benchmark results as data: every benchmark script appends its result rows to
benchmarks/results.csv, one row per number, with the machine, versions and commit it ran on.

Recording is always on: the CSV is the history of every measurement (docs/performance.md shows
the newest row of each headline metric per machine kind, `python docs/generate.py` writes it).
`BENCH_RESULTS=<path>` appends to another file instead (`BENCH_RESULTS=/dev/null` records
nothing). Imports no JAX: a script
that has not imported jax (the parent of `xla_options.py`) records the CPU as its machine.
"""

import csv
import datetime
import importlib.metadata
import os
import platform
import shlex
import sys
from collections.abc import Iterable

from experiment.rundir.code import code_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results.csv")
COLUMNS = ("date", "machine", "jax", "jaxlib", "commit", "benchmark", "command", "metric",
           "value", "unit")


def cpu() -> str:
    """The CPU's model name and the cores this process may use, e.g. "AMD EPYC (2 cores)"."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model} ({cores} cores)"


def machine() -> str:
    """What the benchmark ran on: the accelerator and its count where JAX runs on one (and the
    host CPU), else the CPU."""
    jax = sys.modules.get("jax")
    if jax is not None and jax.default_backend() != "cpu":
        devices = jax.devices()
        return f"{devices[0].device_kind} x{len(devices)}, host {cpu()}"
    return cpu()


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def commit() -> str:
    """The checkout's commit, with "+changes" when tracked files (other than the results file)
    differ from it; "unknown" outside a git checkout."""
    return code_version(ROOT, exclude=("benchmarks/results.csv",))


COMMIT = commit()  # when the script started, its code read: a long run may outlast a checkout


def command() -> str:
    """The command line that ran the benchmark, as a user would type it from the checkout."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return shlex.join(["python", script, *sys.argv[1:]])


def record(benchmark: str, rows: Iterable[tuple[str, float, str]]) -> None:
    """Append `(metric, value, unit)` rows of `benchmark` (the script's name) to the results
    file (BENCH_RESULTS, default benchmarks/results.csv), and say so on stderr."""
    path = os.environ.get("BENCH_RESULTS") or RESULTS
    common = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "machine": machine(), "jax": version("jax"), "jaxlib": version("jaxlib"),
              "commit": COMMIT, "benchmark": benchmark, "command": command()}
    lines = [{**common, "metric": metric, "value": f"{float(value):.6g}", "unit": unit}
             for metric, value, unit in rows]
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(lines)
    print(f"recorded {len(lines)} result rows in {path}", file=sys.stderr)


def read(path: str = RESULTS) -> list[dict[str, str]]:
    """The rows of a results file, oldest first ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
