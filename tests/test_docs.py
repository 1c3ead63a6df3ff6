"""The docs' generated parts (docs/generate.py) match the code: the flag reference, the method
table and list, the headline benchmark results."""

import ast
import importlib.util
import os
import re

import pytest

from experiment.startup import SCRIPTS
from interventions import catalog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_generate():
    spec = importlib.util.spec_from_file_location("docs_generate",
                                                  os.path.join(ROOT, "docs", "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generate()


def read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


@pytest.mark.slow
def test_the_committed_docs_are_what_the_code_generates():
    stale = generate.stale(generate.generated())
    assert not stale, f"{stale} differ from the code; run python docs/generate.py"


def test_stale_names_a_file_that_differs():
    assert generate.stale({"README.md": read("README.md")}) == []
    assert generate.stale({"README.md": read("README.md") + "\n"}) == ["README.md"]
    assert generate.stale({"docs/no-such-page.md": ""}) == ["docs/no-such-page.md"]


def test_the_readme_lists_the_registered_methods():
    block = re.search(r"<!-- generated: methods -->\n(.*?)<!-- end generated: methods -->",
                      read("README.md"), re.DOTALL)
    assert block, "README.md has no method list"
    listed = re.findall(r"`(\w+)` \((event|projection|loss)\)", block.group(1))
    assert listed == [(m.name, m.kind) for m in catalog.BUILTIN]


def test_every_method_has_a_row_and_a_page():
    table = read("docs/interventions.md")
    rows = re.findall(r"^\| \[`(\w+)`\]\(interventions/(\w+)\.md\)", table, re.MULTILINE)
    assert rows == [(m.name, m.name) for m in catalog.BUILTIN]
    for method in catalog.BUILTIN:
        assert os.path.exists(os.path.join(ROOT, "docs", "interventions", f"{method.name}.md")), \
            f"docs/interventions/{method.name}.md is missing"


def _entry_points() -> list[str]:
    """launch/*.py files with an `if __name__ == "__main__":` block."""
    found = []
    for name in sorted(os.listdir(os.path.join(ROOT, "launch"))):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(read(os.path.join("launch", name)))
        for node in tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                found.append(name)
    return found


def test_every_entry_point_is_in_the_flag_reference():
    entry_points = _entry_points()
    assert {"run_sac.py", "run_bro.py", "sweep.py", "aggregate.py"} <= set(entry_points)
    assert set(entry_points) <= set(SCRIPTS), "add the script to experiment.startup.SCRIPTS"
    page = read("docs/flags.md")
    for script in SCRIPTS:
        assert f"## launch/{script}\n" in page
        assert f"\nlaunch/{script}:\n" in page  # absl's heading of the script's own flags


@pytest.mark.parametrize("script", _entry_points())
def test_a_script_docstring_prints_as_written(script):
    """absl's --help prints a script's docstring through `%` formatting (a lone "95 % s"
    becomes the script's path), and a backslash that ends a line of a plain string joins the
    lines of a command example into one."""
    doc = ast.get_docstring(ast.parse(read(os.path.join("launch", script))), clean=False)
    assert doc.count("%") == 2 * doc.count("%%"), f"{script}: write % as %% or in words"
    joined = re.findall(r"\S {4,}--\w", doc)
    assert not joined, f"{script}: a command's continuation lost its backslash: {joined}"


def test_the_flag_reference_has_no_machine_path():
    assert ROOT not in read("docs/flags.md")


def _row(date, machine, command, metric, value, unit="s", commit="abc"):
    return {"date": date, "machine": machine, "jax": "0.10.2", "jaxlib": "0.10.2",
            "commit": commit, "benchmark": command.split("/")[-1].split(".py")[0],
            "command": command,
            "metric": metric, "value": value, "unit": unit}


def _table(text: str, machine: str) -> dict[str, str]:
    """{measure: its whole row} of `machine`'s headline table in `text`."""
    section = re.search(rf"^### {re.escape(machine)}\n(.*?)(?=^### |\Z)", text,
                        re.MULTILINE | re.DOTALL)
    assert section, f"no table for {machine}"
    return {line.split(" | ")[0][2:]: line for line in section.group(1).splitlines()
            if line.startswith("| ") and not line.startswith(("| **", "| measure |", "| --- |"))}


def test_the_performance_page_shows_the_newest_headline_numbers_per_machine():
    sac = "SAC update, UTD 8, 1 seed(s)"
    rows = [
        _row("2026-01-01T00:00:00Z", "CPU A", "python benchmarks/throughput.py", sac, "100",
             "seed-updates/s"),
        _row("2026-01-01T00:00:00Z", "CPU A", "python benchmarks/throughput.py", sac, "40",
             "% of matmul peak"),
        _row("2026-02-01T00:00:00Z", "CPU A", "python benchmarks/throughput.py --quick", sac,
             "150", "seed-updates/s"),
        _row("2026-02-01T00:00:00Z", "CPU A", "python benchmarks/throughput.py --quick", sac,
             "55", "% of matmul peak"),
        _row("2026-02-01T00:00:00Z", "CPU A", "python benchmarks/throughput.py --quick",
             "end to end, UTD 1", "246", "env steps/s"),
        _row("2026-03-01T00:00:00Z", "CPU A", "python benchmarks/throughput.py --e2e_seeds=4",
             "end to end, UTD 1", "90", "env steps/s"),
        _row("2026-03-01T00:00:00Z", "CPU A",
             "python benchmarks/throughput.py --e2e_seeds=4 --replay_on_device",
             "end to end, UTD 8", "30", "env steps/s"),
        _row("2026-01-20T00:00:00Z", "CPU A", "python benchmarks/continual_speed.py",
             "random_label_digits, 100 tasks, 10 seeds, whole comparison of 11 methods", "1.5",
             "min"),
        _row("2026-01-20T00:00:00Z", "H100 x1, host CPU B", "python benchmarks/bro_update.py",
             "BRO update, UTD 10, 1 seed(s)", "2000", "seed-updates/s"),
    ]
    text = generate.performance_table(rows)
    cpu, gpu = _table(text, "CPU A"), _table(text, "H100 x1, host CPU B")
    assert len(cpu) == len(gpu) == len(generate.HEADLINES)
    # the newest row of a metric, its share of the peak from the same run, its date and command
    assert cpu["SAC, UTD 8, batch 256, 1 seed"] == (
        "| SAC, UTD 8, batch 256, 1 seed | 150 seed-updates/s (55 % of the matmul peak) | "
        "2026-02-01 | `python benchmarks/throughput.py --quick` |")
    # end to end: the seed count and the run's options come from the command
    assert "| 246 env steps/s | 2026-02-01 |" in cpu["UTD 1, 1 seed"]
    assert "| 90 env steps/s | 2026-03-01 |" in cpu["UTD 1, 4 seeds"]
    assert "not measured" in cpu["UTD 8, 4 seeds"]  # only with --replay_on_device
    assert "`python benchmarks/throughput.py --e2e_seeds=4` |" in cpu["UTD 8, 4 seeds"]
    assert "| 1.5 min |" in cpu["digits, 100 tasks x 10 seeds, 11 methods"]
    # no number is made up: a metric without a row on a machine is not measured there
    assert "not measured" in cpu["BRO, UTD 10, batch 128, 1 seed"]
    assert "| 2,000 seed-updates/s | 2026-01-20 |" in gpu["BRO, UTD 10, batch 128, 1 seed"]
    assert "not measured" in gpu["SAC, UTD 8, batch 256, 1 seed"]
    assert "not measured" in cpu["against sbx (stable-baselines-jax)"]
    assert "### GPU\n" not in text  # a GPU's rows are there
    without_gpu = generate.performance_table(rows[:-1])
    assert "### GPU\n\nNot measured" in without_gpu
    assert "Not measured" in generate.performance_table([])


def test_a_flag_is_read_from_a_benchmark_command():
    flag = generate._flag
    assert flag("python benchmarks/throughput.py --e2e_seeds=4", "e2e_seeds", "1") == "4"
    assert flag("python benchmarks/throughput.py --e2e_seeds 4", "e2e_seeds", "1") == "4"
    assert flag("python benchmarks/throughput.py", "e2e_seeds", "1") == "1"
    assert flag("python b.py --replay_on_device --quick", "replay_on_device", "false") == "true"
    assert flag("python b.py --noreplay_on_device", "replay_on_device", "false") == "false"


def test_the_committed_performance_page_is_short_and_names_its_sources():
    page = read("docs/performance.md")
    assert len(page.splitlines()) < 200
    assert "benchmarks/results.csv" in page and "(../benchmarks/README.md)" in page


def test_a_page_without_its_markers_is_an_error():
    with pytest.raises(ValueError, match="generated: methods"):
        generate.with_block("no markers here", "methods", "x\n", "README.md")
    text = "a\n<!-- generated: m -->\nold\n<!-- end generated: m -->\nb\n"
    assert generate.with_block(text, "m", "new\n", "p") == \
        "a\n<!-- generated: m -->\nnew\n<!-- end generated: m -->\nb\n"
