"""launch/plot_run.py on a run directory whose files are damaged or still being written: a row
that cannot be read is one line naming the file and its line, with exit code 2; a last line cut
short (no line end: the run is writing it, or was killed while it did) is left out with one
warning line, and the figures are drawn from the rows before it."""

import os
import subprocess
from pathlib import Path

import pytest

from analysis import run_figures
from analysis.run_figures import PlotError, PlotWarning
from tests.helpers.runs import run

EVAL_HEADER = "env_step,seed,return,wall_time"


def rl_run(folder: Path, eval_rows: str = "") -> Path:
    """An RL run directory by hand: eval.csv of 2 seeds x 4 evaluations (then `eval_rows`,
    as written), diagnostics.csv and interventions.csv."""
    folder.mkdir(parents=True)
    rows = [EVAL_HEADER] + [f"{250 * k},{s},{10.0 * k + s},{k}.0" for k in range(1, 5)
                            for s in (0, 1)]
    (folder / "eval.csv").write_text("\n".join(rows) + "\n" + eval_rows)
    rows = ["env_step,seed,network,layer,metric,value"]
    rows += [f"{250 * k},{s},critic,MLP_0/Dense_0,{m},{1.5 * k}" for k in range(1, 5)
             for s in (0, 1) for m in ("cond", "stable_rank", "fro")]
    (folder / "diagnostics.csv").write_text("\n".join(rows) + "\n")
    rows = ["env_step,seed,kind,network,layer,metric,value"]
    rows += [f"500,{s},reset,critic,MLP_0/Dense_0,fro_change,2.0" for s in (0, 1)]
    (folder / "interventions.csv").write_text("\n".join(rows) + "\n")
    return folder


def continual_run(folder: Path) -> Path:
    """A continual run directory by hand: tasks.csv of 2 seeds x 3 tasks, diagnostics.csv."""
    folder.mkdir(parents=True)
    rows = ["task,seed,online_accuracy,final_accuracy,loss"]
    rows += [f"{t},{s},0.{5 + t},0.9,0.7" for t in range(3) for s in (0, 1)]
    (folder / "tasks.csv").write_text("\n".join(rows) + "\n")
    rows = ["task,seed,network,layer,metric,value"]
    rows += [f"{t},{s},net,Dense_0,cond,{1 + t}" for t in range(3) for s in (0, 1)]
    (folder / "diagnostics.csv").write_text("\n".join(rows) + "\n")
    return folder


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines))


# (file, damage, what the one line says after "<file>: ")
RL_DAMAGE = [
    ("eval.csv", lambda p: append(p, "500,0,\n"),
     "line 10: 3 values where its header has 4 columns (env_step,seed,return,wall_time)"),
    ("eval.csv", lambda p: append(p, "50\n"), "line 10: 1 value where its header has 4 columns"),
    ("eval.csv", lambda p: replace_line(p, 4, "500,0,abc,2.0"),
     "line 4: return is 'abc', not a number"),
    ("eval.csv", lambda p: replace_line(p, 4, "500,0,,2.0"), "line 4: return is '', not a number"),
    ("eval.csv", lambda p: replace_line(p, 5, "5e2,1,3.0,2.0"),
     "line 5: env_step is '5e2', not a whole number"),
    ("eval.csv", lambda p: replace_line(p, 1, "env_step,seed,wall_time"),
     "line 1: no column return (its header: env_step,seed,wall_time)"),
    ("eval.csv", lambda p: replace_line(p, 3, "250,1,11.0,1.0,7"),
     "line 3: 5 values where its header has 4 columns"),
    ("eval.csv", lambda p: p.write_bytes(p.read_bytes()[:40] + b"\xff\xfe\x00" + b"\n"),
     "line 2: byte 0xff is not text (the file is damaged)"),
    ("eval.csv", lambda p: replace_line(p, 5, "\x00" * 16),  # a crash's zero-filled blocks
     "line 5: 1 value where its header has 4 columns"),
    ("diagnostics.csv", lambda p: replace_line(p, 7, "500,0,critic,MLP_0/Dense_0,cond,x"),
     "line 7: value is 'x', not a number"),
    ("diagnostics.csv", lambda p: replace_line(p, 1, "env_step,seed,network,layer,value"),
     "line 1: no column metric"),
    ("diagnostics.csv", lambda p: append(p, "1000,0,critic\n"), "line 26: 3 values"),
    ("interventions.csv", lambda p: replace_line(p, 2, "half,0,reset,critic,MLP_0/Dense_0,"
                                                       "fro_change,2.0"),
     "line 2: env_step is 'half', not a whole number"),
    ("interventions.csv", lambda p: replace_line(p, 1, "step,seed,kind,network,layer,metric,"
                                                       "value"),
     "line 1: no column env_step"),
]


@pytest.mark.parametrize("name, damage, message", RL_DAMAGE,
                         ids=[f"{n}: {m.split(': ', 1)[1][:40]}" for n, _, m in RL_DAMAGE])
def test_a_damaged_file_of_an_rl_run_is_one_line_naming_it_and_its_line(tmp_path, name, damage,
                                                                        message):
    folder = rl_run(tmp_path / "run")
    damage(folder / name)
    with pytest.raises(PlotError) as error:
        run_figures.plot_run(str(folder), str(tmp_path / "out"))
    text = str(error.value)
    assert text.startswith(f"{folder / name}: {message}"), text
    assert "\n" not in text


CONTINUAL_DAMAGE = [
    ("tasks.csv", lambda p: append(p, "3,0\n"), "line 8: 2 values where its header has 5"),
    ("tasks.csv", lambda p: replace_line(p, 3, "0,1,good,0.9,0.7"),
     "line 3: online_accuracy is 'good', not a number"),
    ("tasks.csv", lambda p: replace_line(p, 3, "0.5,1,0.5,0.9,0.7"),
     "line 3: task is '0.5', not a whole number"),
    ("tasks.csv", lambda p: replace_line(p, 1, "task,seed,final_accuracy,loss"),
     "line 1: no column online_accuracy"),
    ("diagnostics.csv", lambda p: replace_line(p, 2, "zero,0,net,Dense_0,cond,1"),
     "line 2: task is 'zero', not a whole number"),
]


@pytest.mark.parametrize("name, damage, message", CONTINUAL_DAMAGE,
                         ids=[f"{n}: {m.split(': ', 1)[1][:40]}" for n, _, m in CONTINUAL_DAMAGE])
def test_a_damaged_file_of_a_continual_run_is_one_line_naming_it_and_its_line(
        tmp_path, name, damage, message):
    folder = continual_run(tmp_path / "run")
    damage(folder / name)
    with pytest.raises(PlotError) as error:
        run_figures.plot_run(str(folder), str(tmp_path / "out"))
    assert str(error.value).startswith(f"{folder / name}: {message}"), str(error.value)


@pytest.mark.parametrize("name, cut", [("eval.csv", "500,0,"), ("eval.csv", "50"),
                                       ("eval.csv", "1250,0,77.5,5.0"),
                                       ("diagnostics.csv", "1000,1,critic,MLP_0/Dense_0,co"),
                                       ("interventions.csv", "75")])
def test_a_last_line_cut_short_is_left_out_with_a_warning(tmp_path, monkeypatch, name, cut):
    """Every row a run writes ends with its line end: a last line without one was cut while it
    was written (even one that reads as numbers: 77.5 may be the start of 77.53)."""
    figures = {}
    monkeypatch.setattr(run_figures, "_save", lambda fig, path: figures.setdefault(
        os.path.basename(path), fig) and path)
    folder = rl_run(tmp_path / "run")
    append(folder / name, cut)
    lines = (folder / name).read_text().count("\n") + 1
    with pytest.warns(PlotWarning) as caught:
        written = run_figures.plot_run(str(folder), str(tmp_path / "out"))
    assert [os.path.basename(p) for p in written] == ["learning_curve.png",
                                                      "diagnostics_critic.png"]
    assert {str(w.message) for w in caught} == {
        f"{folder / name}: line {lines}, its last, has no line end: the run is still writing it, "
        "or stopped while it did; it is left out"}
    ax = figures["learning_curve.png"].axes[0]
    seed0 = next(line for line in ax.lines if line.get_label() == "seed 0")
    assert list(seed0.get_xdata()) == [250, 500, 750, 1000]
    assert list(seed0.get_ydata()) == [10.0, 20.0, 30.0, 40.0]


def test_a_header_cut_short_is_an_empty_file(tmp_path):
    folder = rl_run(tmp_path / "run")
    (folder / "eval.csv").write_text("env_step,se")
    with pytest.warns(PlotWarning, match="line 1, its last, has no line end.*taken as empty"):
        with pytest.raises(PlotError, match="eval.csv has no evaluation yet"):
            run_figures.plot_run(str(folder), str(tmp_path / "out"))


def plot_run(folder: Path, out: Path) -> subprocess.CompletedProcess:
    return run("plot_run.py", str(folder), f"--out={out}", check=False)


@pytest.mark.slow
@pytest.mark.parametrize("row", ["500,0,", "50"])
def test_plot_run_cut_mid_row_warns_and_draws_and_a_bad_row_is_one_line_and_exit_2(tmp_path,
                                                                                    row):
    """The recipes: eval.csv of a run killed mid-row (last line `500,0,` or `50`, no line end)
    draws the rest with one warning; the same row with its line end is damage, exit code 2."""
    folder = rl_run(tmp_path / "cut", row)
    proc = plot_run(folder, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: {folder / 'eval.csv'}: line 10, its last, has no line end: the run is still "
        "writing it, or stopped while it did; it is left out"]
    assert sorted(os.listdir(tmp_path / "out")) == ["diagnostics_critic.png",
                                                    "learning_curve.png"]
    append(folder / "interventions.csv", "75")  # read for every panel, said once
    proc = plot_run(folder, tmp_path / "out")
    assert proc.returncode == 0 and len(proc.stderr.splitlines()) == 2, proc.stderr
    assert proc.stderr.splitlines()[1].startswith(
        f"warning: {folder / 'interventions.csv'}: line 4, its last, has no line end")

    folder = rl_run(tmp_path / "bad", row + "\n")
    proc = plot_run(folder, tmp_path / "out2")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: {folder / 'eval.csv'}: line 10: {len(row.split(','))} value"
        f"{'s' if ',' in row else ''} where its header has 4 columns "
        "(env_step,seed,return,wall_time)"], proc.stderr


@pytest.mark.slow
def test_a_tiny_continual_runs_files_cut_or_damaged(tmp_path):
    """A real run's tasks.csv cut mid-row draws with one warning; a value changed to text in its
    diagnostics.csv is one error line naming the file and line, exit code 2."""
    run("run_continual.py", "--task=random_label_digits", "--num_tasks=2", "--num_seeds=1",
        "--hidden_dim=8", "--epochs=1", "--progress=false", f"--logdir={tmp_path}")
    folder = tmp_path / "continual" / "random_label_digits" / "none-seed0"
    tasks = folder / "tasks.csv"
    text = tasks.read_text()
    tasks.write_text(text + text.splitlines()[-1][:5])  # a third row, cut after 5 characters
    proc = plot_run(folder, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: {tasks}: line 4, its last, has no line end: the run is still writing it, "
        "or stopped while it did; it is left out"]
    assert "learning_curve.png" in os.listdir(tmp_path / "out")

    diagnostics = folder / "diagnostics.csv"
    lines = diagnostics.read_text().splitlines(keepends=True)
    fields = lines[5].rstrip("\n").split(",")
    lines[5] = ",".join([*fields[:-1], "n/a"]) + "\n"
    diagnostics.write_text("".join(lines))
    proc = plot_run(folder, tmp_path / "out")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[-1] == f"error: {diagnostics}: line 6: value is 'n/a', not a number", lines
    assert len(lines) == 2 and "Traceback" not in proc.stderr  # the warning, then the error
