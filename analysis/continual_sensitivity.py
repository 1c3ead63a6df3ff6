"""The --settings comparison of continual runs (launch/aggregate_continual.py): the methods
within each combination of config.json settings (`combinations`; a run counts in every value of
a setting it does not read, grouping.inert), and how the reference ranks across them
(`sensitivity_row`, `factors`), as sensitivity.csv and sensitivity.md."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from analysis.continual import RunScores, Summary
from analysis.errors import AggregationError
from analysis.grouping import config_value, inert


def setting_text(value: object) -> str:
    """A setting's value as a combination names it: a string as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _value_order(text: str) -> tuple:
    try:
        return 0, float(text), text
    except ValueError:
        return 1, 0.0, text


class Combination(NamedTuple):
    settings: dict[str, str]  # key -> value (setting_text)
    runs: list[RunScores]  # the runs of every key's value, or inert in the key


def combinations(runs: Sequence[RunScores], keys: Sequence[str]) -> list[Combination]:
    """The product of the values of `keys` among the runs that read them (grouping.inert), each
    with the runs that match it in every key they read: a run inert in a key belongs to every
    value of it. AggregationError for a key no run reads, or one a run reads but does not
    record."""
    read = []  # per run: {key: value} of the keys it reads
    for run in runs:
        source = os.path.join(run.folder, "config.json")
        read.append({k: setting_text(config_value(run.config, k, source, "--settings key"))
                     for k in keys if not inert(run.config, k)})
    values = {k: sorted({mine[k] for mine in read if k in mine}, key=_value_order) for k in keys}
    unread = [k for k in keys if not values[k]]
    if unread:
        raise AggregationError(f"--settings: no run reads {unread[0]} (it is a setting of a "
                               "method, or of events, that none of the runs makes)")
    out = []
    for combo in itertools.product(*values.values()):
        settings = dict(zip(keys, combo, strict=True))
        out.append(Combination(settings, [
            run for run, mine in zip(runs, read, strict=True)
            if all(settings[k] == v for k, v in mine.items())]))
    return out


def combination_name(settings: dict[str, str]) -> str:
    """'k1=v1,k2=v2': the combination's folder under <out>/settings/ ('/' in a value as '_')."""
    return ",".join(f"{k}={v}" for k, v in settings.items()).replace("/", "_").replace(
        os.sep, "_")


def sensitivity_row(settings: dict[str, str], summary: Summary, reference: str) -> dict:
    """One combination's standing of `reference`: its rank among the methods by mean over all
    tasks (1 = best; one plus the methods with a higher mean), its mean, the best method, every
    method's mean, and P(reference > X) with intervals (None where the reference is absent)."""
    means = {r["method"]: r["all_mean"] for r in summary.table}
    best = max(means, key=lambda m: means[m])
    improvement = [{k: r[k] for k in ("over", "probability", "lower", "upper")}
                   for r in summary.improvement]
    present = reference in means
    return {
        "settings": dict(settings), "methods": len(means),
        "rank": 1 + sum(v > means[reference] for v in means.values()) if present else None,
        "reference_mean": means[reference] if present else None,
        "best": best, "best_mean": means[best],
        "mean_probability": (float(np.mean([r["probability"] for r in improvement]))
                             if improvement else None),
        "means": means, "improvement": improvement}


def _standing(row: dict, reference: str, others: Sequence[str]) -> tuple[int, float]:
    """The reference's rank and mean P(reference > X) among `others` and itself."""
    means = row["means"]
    probability = {r["over"]: r["probability"] for r in row["improvement"]}
    rank = 1 + sum(means[m] > means[reference] for m in others)
    return rank, float(np.mean([probability[m] for m in others]))


def factors(rows: Sequence[dict], keys: Sequence[str], reference: str) -> list[dict]:
    """Per key, which factor moves the ranking: over the pairs of combinations (sensitivity
    rows) that differ in this key alone and both hold the reference and another method, the
    number of pairs, how many change the reference's rank, and the mean absolute change of its
    rank and of its mean P(reference > X); both taken over the methods the two have in common."""
    out = []
    for key in keys:
        changes = []
        for a, b in itertools.combinations(rows, 2):
            sa, sb = a["settings"], b["settings"]
            if sa[key] == sb[key] or any(sa[k] != sb[k] for k in keys if k != key):
                continue
            if reference not in a["means"] or reference not in b["means"]:
                continue
            others = sorted((set(a["means"]) & set(b["means"])) - {reference})
            if not others:
                continue
            (ra, pa), (rb, pb) = (_standing(row, reference, others) for row in (a, b))
            changes.append((ra != rb, abs(ra - rb), abs(pa - pb)))
        n = len(changes)
        out.append({"setting": key, "pairs": n, "rank_changed": sum(c[0] for c in changes),
                    "mean_abs_rank_change": float(np.mean([c[1] for c in changes])) if n else None,
                    "mean_abs_probability_change": (float(np.mean([c[2] for c in changes]))
                                                    if n else None)})
    return out


def _others(rows: Sequence[dict], reference: str) -> list[str]:
    """Every method but the reference, in the order they first appear."""
    return list(dict.fromkeys(m for row in rows for m in row["means"] if m != reference))


def sensitivity_table(rows: Sequence[dict], keys: Sequence[str], reference: str) -> list[dict]:
    """sensitivity.csv: one row per combination; P columns of a method it lacks left empty."""
    table = []
    for row in rows:
        line = {**row["settings"]}
        line.update({k: "" if row[k] is None else row[k] for k in (
            "methods", "rank", "reference_mean", "best", "best_mean", "mean_probability")})
        probability = {r["over"]: r for r in row["improvement"]}
        for m in _others(rows, reference):
            r = probability.get(m)
            name = f"P({reference} > {m})"
            line.update({name: r["probability"] if r else "",
                         f"{name} lower": r["lower"] if r else "",
                         f"{name} upper": r["upper"] if r else ""})
        table.append(line)
    return table


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def sensitivity_markdown(rows: Sequence[dict], factor_rows: Sequence[dict], keys: Sequence[str],
                         reference: str, metric: str, confidence: float,
                         empty: Sequence[dict] = ()) -> str:
    """sensitivity.md: the reference's standing per combination, then which factor moves it."""
    pct = f"{100 * confidence:g} %"
    others = _others(rows, reference)
    lines = [f"{reference} per combination of {', '.join(keys)}: its rank among the methods by "
             f"mean {metric} over all tasks (1 = best, of the methods present), its mean, the "
             f"best method, and P({reference} > X) on the runs' means over all tasks ({pct} CI) "
             "with its mean over the methods present.",
             "", "| " + " | ".join([*keys, f"{reference} rank", f"{reference} mean",
                                    "best (mean)", f"mean P({reference} > X)",
                                    *(f"P({reference} > {m})" for m in others)])
             + " |", "| " + " | ".join(["---"] * (len(keys) + 4 + len(others))) + " |"]
    for row in rows:
        probability = {r["over"]: r for r in row["improvement"]}
        rank = "—" if row["rank"] is None else f"{row['rank']} of {row['methods']}"
        cells = [*row["settings"].values(), rank, _number(row["reference_mean"]),
                 f"{row['best']} ({row['best_mean']:.3f})", _number(row["mean_probability"])]
        cells += [f"{p['probability']:.3f} [{p['lower']:.3f}, {p['upper']:.3f}]"
                  if (p := probability.get(m)) else "—" for m in others]
        lines.append("| " + " | ".join(cells) + " |")
    if empty:
        lines += ["", "No runs: " + "; ".join(combination_name(e) for e in empty) + "."]
    lines += ["", f"Which setting moves the ranking: over the pairs of combinations that differ "
              f"in that setting alone, how often {reference}'s rank changes, and the mean "
              f"absolute change of its rank and of its mean P({reference} > X) (both over the "
              "methods the two combinations have in common).", "",
              f"| setting | pairs | {reference}'s rank changed | mean abs. rank change | "
              f"mean abs. change of mean P({reference} > X) |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for f in factor_rows:
        lines.append(f"| {f['setting']} | {f['pairs']} | {f['rank_changed']} of {f['pairs']} | "
                     f"{_number(f['mean_abs_rank_change'], 2)} | "
                     f"{_number(f['mean_abs_probability_change'])} |")
    return "\n".join(lines) + "\n"
