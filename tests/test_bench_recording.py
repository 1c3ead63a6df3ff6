"""Benchmark results as data: benchmarks/recording.py appends one CSV row per number, and a
benchmark script run as a user runs it records its results there."""

import csv
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SPEC = importlib.util.spec_from_file_location(  # by path: benchmarks/ is not on sys.path
    "benchmarks_recording", os.path.join(ROOT, "benchmarks", "recording.py"))
recording = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(recording)


def read_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_record_appends_rows_under_one_header(tmp_path, monkeypatch):
    path = tmp_path / "results.csv"
    monkeypatch.setenv("BENCH_RESULTS", str(path))
    monkeypatch.setattr(sys, "argv", [os.path.join(ROOT, "benchmarks", "toy.py"), "--quick"])
    recording.record("toy", [("speed", 1234.56789, "steps/s"), ("memory, 2 seeds", 0.5, "MiB")])
    recording.record("toy", [("speed", 2, "steps/s")])
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(recording.COLUMNS)
    assert sum(line.startswith("date,") for line in lines) == 1
    rows = read_rows(path)
    assert [(r["metric"], r["value"], r["unit"]) for r in rows] == [
        ("speed", "1234.57", "steps/s"), ("memory, 2 seeds", "0.5", "MiB"),
        ("speed", "2", "steps/s")]
    first = rows[0]
    assert first["benchmark"] == "toy"
    assert first["command"] == "python benchmarks/toy.py --quick"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["date"])
    assert re.fullmatch(r"[0-9a-f]{12}(\+changes)?|unknown", first["commit"])
    assert first["machine"] == recording.cpu() and re.search(r"\(\d+ cores\)$", first["machine"])
    assert first["jax"] == recording.version("jax") != "not installed"
    assert recording.read(str(path)) == rows


@pytest.mark.slow
def test_a_benchmark_script_records_its_results(tmp_path):
    path = tmp_path / "results.csv"
    env = {**os.environ, "BENCH_RESULTS": str(path),
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "benchmarks/batch_sums.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.splitlines()
    assert len(printed) == 4 and "XLA reduce" in printed[1]
    rows = read_rows(path)
    assert {r["benchmark"] for r in rows} == {"batch_sums"}
    assert {r["command"] for r in rows} == {"python benchmarks/batch_sums.py"}
    assert len(rows) == 6 and {r["unit"] for r in rows} == {"us"}
    # the printed microseconds are the recorded ones
    shown = [float(x) for line in printed[1:] for x in re.findall(r"([\d.]+) us", line)]
    recorded = [float(r["value"]) for r in rows]
    assert len(shown) == 6
    assert all(abs(a - b) <= 0.051 for a, b in zip(shown, recorded, strict=True))
    assert f"recorded 6 result rows in {path}" in proc.stderr
