"""The docs' generated parts (docs/generate.py) match the code: the flag reference, the method
table and list, the latest benchmark results."""

import ast
import importlib.util
import os
import re

import pytest

from interventions import catalog
from launch.startup import SCRIPTS

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
    assert set(entry_points) <= set(SCRIPTS), "add the script to launch.startup.SCRIPTS"
    page = read("docs/flags.md")
    for script in SCRIPTS:
        assert f"## launch/{script}\n" in page
        assert f"\nlaunch/{script}:\n" in page  # absl's heading of the script's own flags


def test_the_flag_reference_has_no_machine_path():
    assert ROOT not in read("docs/flags.md")


def _row(date, machine, command, metric, value, unit="s", commit="abc"):
    return {"date": date, "machine": machine, "jax": "0.10.2", "jaxlib": "0.10.2",
            "commit": commit, "benchmark": command.split("/")[-1], "command": command,
            "metric": metric, "value": value, "unit": unit}


def test_the_performance_table_shows_each_commands_latest_run_per_machine():
    rows = [
        _row("2026-01-01T00:00:00Z", "CPU A", "python benchmarks/x.py", "speed", "1.5",
             commit="old"),
        _row("2026-01-01T00:00:00Z", "CPU A", "python benchmarks/x.py", "memory", "7"),
        _row("2026-02-01T00:00:00Z", "CPU A", "python benchmarks/x.py", "speed", "2.25",
             commit="new"),
        _row("2026-01-15T00:00:00Z", "CPU A", "python benchmarks/y.py --quick", "time", "3"),
        _row("2026-01-20T00:00:00Z", "GPU B", "python benchmarks/x.py", "speed", "99"),
    ]
    text = generate.performance_table(rows)
    sections = re.split(r"^### ", text, flags=re.MULTILINE)[1:]
    assert [s.splitlines()[0] for s in sections] == ["CPU A", "GPU B"]
    cpu, gpu = sections
    assert "| speed | 2.25 | s |" in cpu and "1.5" not in cpu and "memory" not in cpu
    assert "commit new" in cpu and "commit old" not in cpu
    assert "`python benchmarks/y.py --quick`: 2026-01-15" in cpu and "| time | 3 | s |" in cpu
    assert "| speed | 99 | s |" in gpu and "2.25" not in gpu
    assert "No results" in generate.performance_table([])


def test_a_page_without_its_markers_is_an_error():
    with pytest.raises(ValueError, match="generated: methods"):
        generate.with_block("no markers here", "methods", "x\n", "README.md")
    text = "a\n<!-- generated: m -->\nold\n<!-- end generated: m -->\nb\n"
    assert generate.with_block(text, "m", "new\n", "p") == \
        "a\n<!-- generated: m -->\nnew\n<!-- end generated: m -->\nb\n"
