"""Write the parts of the docs that come from the code, so that they cannot go stale unseen.

    python docs/generate.py           # rewrite them
    python docs/generate.py --check   # exit 1 naming each stale file (tests/test_docs.py runs it)

- docs/flags.md: the `--help` of every script in `launch.startup.SCRIPTS` (the one list of the
  command-line entry points), with the checkout's path, the only part that varies by machine,
  written as <checkout>;
- docs/interventions.md, the method table, and README.md, the method list: the built-in methods
  of the intervention registry (`interventions.catalog.BUILTIN`);
- docs/performance.md, the results table: the latest rows of each benchmark command on each
  machine in benchmarks/results.csv.

Each generated part of a hand-written page sits between `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`; docs/flags.md is generated whole.
"""

import argparse
import concurrent.futures
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from interventions import catalog  # noqa: E402
from interventions.registry import Method  # noqa: E402
from launch.startup import SCRIPTS  # noqa: E402


def _load_recording():
    """benchmarks/recording.py, loaded by path (benchmarks/ is a folder of scripts, kept off
    sys.path: its module names, such as `checkpoint` and `aggregate`, are too common)."""
    spec = importlib.util.spec_from_file_location(
        "benchmarks_recording", os.path.join(ROOT, "benchmarks", "recording.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recording = _load_recording()
CHECKOUT = "<checkout>"
# What a method's `default_parts` names, in words.
PARTS = {"param_parts": "every network's weights, targets included",
         "train_parts": "the weights gradient steps train",
         "reset_parts": "networks, optimizer states and scalars"}
WHEN = {"event": "at scheduled steps", "projection": "after every gradient step",
        "loss": "a term in every loss"}


def script_help(script: str) -> str:
    """`python launch/<script> --help` as a user sees it from the checkout's root, 80 columns
    wide (absl wraps to the terminal's width)."""
    env = {**os.environ, "COLUMNS": "80",
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, os.path.join("launch", script), "--help"], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"launch/{script} --help exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-2000:]}")
    return proc.stdout.replace(ROOT, CHECKOUT).rstrip() + "\n"


def flags_page() -> str:
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(SCRIPTS)) as pool:
        helps = list(pool.map(script_help, SCRIPTS))
    parts = ["# Flags\n",
             "Every command-line script's `--help`, as `python docs/generate.py` writes it (do not "
             "edit by hand; `tests/test_docs.py` fails when this page differs from the code).\n",
             "\n".join(f"- [`launch/{s}`](#launch{s.replace('.', '')})" for s in SCRIPTS) + "\n"]
    for script, text in zip(SCRIPTS, helps, strict=True):
        parts.append(f"## launch/{script}\n\n```text\n{text}```\n")
    return "\n".join(parts)


def _default(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _settings(method: Method) -> str:
    return ", ".join(f"`--{flag}={_default(field.default)}`"
                     for flag, (field, _) in method.settings().items())


def methods_table() -> str:
    rows = ["| method | kind | what it does | acts on by default | flags (defaults) |",
            "| --- | --- | --- | --- | --- |"]
    for m in catalog.BUILTIN:
        kind = f"{m.kind} ({WHEN[m.kind]})"
        rows.append(f"| [`{m.name}`](interventions/{m.name}.md) | {kind} | {m.summary} | "
                    f"{PARTS[m.default_parts]} | {_settings(m)} |")
    return "\n".join(rows) + "\n"


def readme_methods() -> str:
    names = ", ".join(f"`{m.name}` ({m.kind})" for m in catalog.BUILTIN)
    return (f"Methods for `--intervention`: {names}; "
            "[docs/interventions.md](docs/interventions.md) describes each.\n")


def latest_runs(rows: list[dict[str, str]]) -> dict[str, dict[str, list[dict[str, str]]]]:
    """{machine: {command: the rows of its latest run there}}, a run being the rows one
    command wrote at one time."""
    runs: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in rows:
        key = (row["machine"], row["command"])
        latest = runs.get(key)
        if latest is None or row["date"] > latest[0]["date"]:
            runs[key] = [row]
        elif row["date"] == latest[0]["date"]:
            latest.append(row)
    out: dict[str, dict[str, list[dict[str, str]]]] = {}
    for (machine, command), run in sorted(runs.items()):
        out.setdefault(machine, {})[command] = run
    return out


def performance_table(rows: list[dict[str, str]]) -> str:
    """The latest run of each benchmark command on each machine, as markdown."""
    if not rows:
        return "No results recorded yet: run a benchmark script (benchmarks/README.md).\n"
    parts = []
    for machine, commands in latest_runs(rows).items():
        parts.append(f"### {machine}\n")
        for command, run in commands.items():
            first = run[0]
            parts.append(f"`{command}`: {first['date'][:10]}, commit {first['commit']}, "
                         f"jax {first['jax']}, jaxlib {first['jaxlib']}\n")
            table = ["| metric | value | unit |", "| --- | --- | --- |"]
            table += [f"| {r['metric']} | {float(r['value']):.4g} | {r['unit']} |" for r in run]
            parts.append("\n".join(table) + "\n")
    return "\n".join(parts)


# (file, block name or None for the whole file, its text)
OUTPUTS: list[tuple[str, str | None, Callable[[], str]]] = [
    ("docs/flags.md", None, flags_page),
    ("docs/interventions.md", "methods", methods_table),
    ("README.md", "methods", readme_methods),
    ("docs/performance.md", "results", lambda: performance_table(recording.read())),
]


def with_block(text: str, name: str, body: str, path: str) -> str:
    """`text` with its block `name` replaced by `body`; ValueError when the markers are missing."""
    start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{path} needs exactly one '{start}' ... '{end}' block")
    return pattern.sub(lambda _: f"{start}\n{body}{end}", text)


def generated() -> dict[str, str]:
    """{path relative to the checkout: its text as generated from the code}."""
    texts: dict[str, str] = {}
    for path, block, make in OUTPUTS:
        full = os.path.join(ROOT, path)
        if block is None:
            texts[path] = make()
            continue
        current = texts.get(path)
        if current is None:
            with open(full) as f:
                current = f.read()
        texts[path] = with_block(current, block, make(), path)
    return texts


def stale(texts: dict[str, str]) -> list[str]:
    """The paths whose file differs from `texts`."""
    out = []
    for path, text in texts.items():
        try:
            with open(os.path.join(ROOT, path)) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            out.append(path)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a generated part is stale")
    args = parser.parse_args()
    texts = generated()
    changed = stale(texts)
    if args.check:
        if changed:
            print(f"stale: {', '.join(changed)}; run python docs/generate.py", file=sys.stderr)
        return 1 if changed else 0
    for path in changed:
        with open(os.path.join(ROOT, path), "w") as f:
            f.write(texts[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
