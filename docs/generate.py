"""Write the parts of the docs that come from the code, so that they cannot go stale unseen.

    python docs/generate.py           # rewrite them
    python docs/generate.py --check   # exit 1 naming each stale file (tests/test_docs.py runs it)

- docs/flags.md: the `--help` of every script in `experiment.startup.SCRIPTS` (the one list of the
  command-line entry points), with the checkout's path, the only part that varies by machine,
  written as <checkout>;
- docs/interventions.md, the method table, and README.md, the method list: the built-in methods
  of the intervention registry (`interventions.catalog.BUILTIN`);
- docs/performance.md, the headline tables: per machine in benchmarks/results.csv, the newest
  measurement of each number in `HEADLINES`, with its date and command ("not measured" where
  there is none).

Each generated part of a hand-written page sits between `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`; docs/flags.md is generated whole.
"""

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from experiment.startup import SCRIPTS  # noqa: E402
from interventions import catalog  # noqa: E402
from interventions.registry import Method  # noqa: E402


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


@dataclasses.dataclass(frozen=True)
class Headline:
    """One row of a machine's headline table: the newest row of results.csv on that machine
    whose benchmark is `benchmark`, whose metric matches `metric` (a regular expression, whole;
    its groups fill `label`'s {0}, {1}, ...), whose unit is `unit` and whose command sets each
    of `flags` (name, its default where the command leaves it out, the value wanted).
    `share` (metric pattern, {} standing for the row's own metric; unit; text) adds a number of
    the same run (date and command), as `text` formats it.
    `command` is what measures it, shown where nothing has; None where no script does yet."""
    group: str
    label: str
    benchmark: str | None
    metric: str
    unit: str
    command: str | None
    flags: tuple[tuple[str, str, str], ...] = ()
    share: tuple[str, str, str] | None = None


def _e2e(utd: int, seeds: int) -> Headline:
    flags = (("e2e_seeds", "1", str(seeds)), ("env_backend", "dm_control", "dm_control"),
             ("replay_on_device", "false", "false"))
    command = "python benchmarks/throughput.py" + (f" --e2e_seeds={seeds}" if seeds > 1 else "")
    return Headline("End to end (SAC, humanoid-stand, training with evaluations)",
                    f"UTD {utd}, {seeds} seed{'s' if seeds > 1 else ''}", "throughput",
                    rf"end to end, UTD {utd}", "env steps/s", command, flags)


_PEAK = (r"{}", "% of matmul peak", "{:.0f} % of the matmul peak")
UPDATES = "Update rate (humanoid dimensions)"
CONTINUAL = "Continual comparison (Random Label, every method's whole run one after another)"
EVENTS = "An event's cost (one SingularClip clip, svd method)"
# The headline numbers, in the order a machine's table shows them.
HEADLINES: tuple[Headline, ...] = (
    Headline(UPDATES, "SAC, UTD 8, batch 256, 1 seed", "throughput",
             r"SAC update, UTD 8, 1 seed\(s\)", "seed-updates/s",
             "python benchmarks/throughput.py", share=_PEAK),
    Headline(UPDATES, "SAC, UTD 8, batch 256, 4 seeds", "throughput",
             r"SAC update, UTD 8, 4 seed\(s\)", "seed-updates/s",
             "python benchmarks/throughput.py", share=_PEAK),
    Headline(UPDATES, "BRO, UTD 10, batch 128, 1 seed", "bro_update",
             r"BRO update, UTD 10, 1 seed\(s\)", "seed-updates/s",
             "python benchmarks/bro_update.py", share=_PEAK),
    Headline(UPDATES, "BRO, UTD 10, batch 128, 4 seeds", "bro_update",
             r"BRO update, UTD 10, 4 seed\(s\)", "seed-updates/s",
             "python benchmarks/bro_update.py", share=_PEAK),
    Headline(UPDATES, "against sbx (stable-baselines-jax)", None, "", "", None),
    _e2e(1, 1), _e2e(8, 1), _e2e(1, 4), _e2e(8, 4),
    Headline(CONTINUAL, "digits, {0} tasks x {1} seeds, {2} methods", "continual_speed",
             r"random_label_digits, (\d+) tasks, (\d+) seeds, whole comparison of (\d+) methods",
             "min", "python benchmarks/continual_speed.py --parts=comparison --data=digits"),
    Headline(CONTINUAL, "MNIST-sized inputs, {0} tasks x {1} seeds, {2} methods",
             "continual_speed",
             r"random_label_mnist, (\d+) tasks, (\d+) seeds, whole comparison of (\d+) methods",
             "min", "python benchmarks/continual_speed.py --parts=comparison --data=mnist"),
    Headline(EVENTS, "SAC's networks, 1 seed: the loop's whole call (median of {0} rounds)",
             "events", r"SAC, 1 seed\(s\), clip, the loop's whole call, median of (\d+) rounds",
             "ms", "python benchmarks/events.py --seeds 1 4"),
    Headline(EVENTS, "SAC's networks, 4 seeds: the loop's whole call (median of {0} rounds)",
             "events", r"SAC, 4 seed\(s\), clip, the loop's whole call, median of (\d+) rounds",
             "ms", "python benchmarks/events.py --seeds 1 4"),
    Headline(EVENTS, "BRO's networks, 1 seed: the clip alone", "clip",
             r"clip event on BRO's networks, 1 seed\(s\), svd", "ms", "python benchmarks/clip.py"),
    Headline(EVENTS, "a continual task boundary, MNIST-sized, {0} seeds", "continual_speed",
             r"random_label_mnist, (\d+) seeds, clip, one event \(its report included\)"
             r"( \(median of \d+ rounds\))?", "ms",
             "python benchmarks/continual_speed.py --parts=events --data=mnist",
             share=(r"random_label_mnist, \d+ seeds, clip, an event per task adds"
                    r"( \(median of \d+ rounds\))?", "%", "adds {:.1f} % to the task's call")),
)


def _flag(command: str, name: str, default: str) -> str:
    """The value `command` gives flag `name` (`--name=v`, `--name v`, absl's `--name` and
    `--noname` for booleans), else `default`."""
    words = shlex.split(command)
    for i, word in enumerate(words):
        if word.startswith(f"--{name}="):
            return word.split("=", 1)[1]
        if word == f"--no{name}":
            return "false"
        if word == f"--{name}":
            following = words[i + 1] if i + 1 < len(words) else "--"
            return "true" if following.startswith("--") else following
    return default


def _newest(rows: list[dict[str, str]], pattern: str, unit: str,
            flags: tuple[tuple[str, str, str], ...] = ()) -> tuple[dict[str, str], re.Match] | None:
    """The newest of `rows` (the last of those written at once) that `pattern` and `unit` match
    and whose command sets `flags` so, with its match."""
    best = None
    for row in rows:
        found = re.fullmatch(pattern, row["metric"])
        if found and row["unit"] == unit and all(_flag(row["command"], name, default) == wanted
                                                 for name, default, wanted in flags):
            if best is None or row["date"] >= best[0]["date"]:
                best = (row, found)
    return best


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def headline_row(rows: list[dict[str, str]], h: Headline) -> str:
    """A headline's table row among one machine's `rows`."""
    mine = [r for r in rows if r["benchmark"] == h.benchmark]
    newest = _newest(mine, h.metric, h.unit, h.flags) if h.benchmark else None
    if newest is None:
        label = re.sub(r"\{\d+\}", "N", h.label)
        command = f"`{h.command}`" if h.command else "no benchmark script yet"
        return f"| {label} | not measured | | {command} |"
    row, found = newest
    value = f"{_number(float(row['value']))} {h.unit}"
    if h.share is not None:
        pattern, unit, text = h.share
        same_run = [r for r in mine if (r["date"], r["command"]) == (row["date"], row["command"])]
        share = _newest(same_run, pattern.format(re.escape(row["metric"])), unit)
        if share is not None:
            value += f" ({text.format(float(share[0]['value']))})"
    return (f"| {h.label.format(*found.groups())} | {value} | {row['date'][:10]} | "
            f"`{row['command']}` |")


def _accelerator(machine: str) -> bool:
    return ", host " in machine  # as recording.machine() names an accelerator


def performance_table(rows: list[dict[str, str]]) -> str:
    """The headline table of each machine in `rows` (results.csv's), each number the newest
    measurement of it there; a GPU section saying so where no row comes from one."""
    machines = sorted({r["machine"] for r in rows}, key=lambda m: (_accelerator(m), m))
    parts = []
    for machine in machines:
        mine = [r for r in rows if r["machine"] == machine]
        table = ["| measure | value | measured | command |", "| --- | --- | --- | --- |"]
        group = None
        for h in HEADLINES:
            if h.group != group:
                group = h.group
                table.append(f"| **{group}** | | | |")
            table.append(headline_row(mine, h))
        parts.append(f"### {machine}\n\n" + "\n".join(table) + "\n")
    if not machines:
        parts.append("### CPU\n\nNot measured: benchmarks/results.csv holds no row yet.\n")
    if not any(map(_accelerator, machines)):
        parts.append("### GPU\n\nNot measured: no row of benchmarks/results.csv comes from a GPU "
                     "yet. The commands above measure one where JAX runs on it (a CUDA jaxlib); "
                     "[performance-gpu.md](performance-gpu.md) describes many seeds per GPU.\n")
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
