"""A stand-in for launch/run_<agent>.py in the sweep tests, honouring the run-script contract.

Linked into a folder as run_sac.py / run_bro.py (the agent is the file name). It takes the
contract's flags, writes the contract's files under <logdir>/<agent>/<env>/<run_name>/,
checkpoints every --checkpoint_every steps (a marker file per checkpoint), resumes from the
latest one with --resume=auto (cutting its logs back to it and noting the step in
resumes.txt) and exits 0 at once on a finished run, or with --dry_run once its flags parse
(after --dry_run_s seconds). It prints the cores it may run on and its PJRT_NPROC.
Training is simulated: each env step sleeps --step_s seconds; the return of seed s at step t
is a fixed function of the run's settings. --fail_at=N exits 1 with a one-line message when it
reaches step N (only while the file --fail_while_exists names exists, if given). A SIGTERM
stops it at its next checkpoint, as the run scripts stop at their next episode end: exit 143.
So that a test can order its signals against a run's progress without racing it, --hold_at=N
holds a run at step N until a SIGTERM comes (only while the file --hold_file names exists, if
given), and a run stopping on a SIGTERM waits while the file --stop_hold_file names exists.
"""

import argparse
import csv
import json
import os
import signal
import sys
import time

INTERVENTIONS = ("none", "reset", "clip")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(prog=os.path.basename(argv[0]), allow_abbrev=False)
    parser.add_argument("--env", required=True)
    parser.add_argument("--intervention", choices=INTERVENTIONS, default="none")
    parser.add_argument("--resume", choices=("auto", "never", "must"), default="auto")
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--run_name", default="")
    for name, default in (("utd", 1), ("seed", 0), ("num_seeds", 1), ("max_steps", 100),
                          ("start_steps", 10), ("eval_every", 10), ("eval_episodes", 1),
                          ("batch_size", 256), ("checkpoint_every", 20), ("fail_at", -1),
                          ("hold_at", -1)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--step_s", type=float, default=0.0)
    parser.add_argument("--fail_while_exists", default="")
    parser.add_argument("--hold_file", default="")
    parser.add_argument("--stop_hold_file", default="")
    parser.add_argument("--dry_run", action="store_true")
    parser.add_argument("--dry_run_s", type=float, default=0.0)
    return parser.parse_args(argv[1:])


def score(args: argparse.Namespace, seed: int, step: int) -> float:
    """Distinct per intervention and UTD, rising with the step."""
    return 100.0 * INTERVENTIONS.index(args.intervention) + 10.0 * args.utd + seed \
        + step / args.max_steps


def latest_checkpoint(ckpt_dir: str) -> int:
    steps = [int(n.split("_")[1]) for n in os.listdir(ckpt_dir) if n.startswith("step_")]
    return max(steps, default=0)


def cut_back(path: str, step: int, header: bool) -> None:
    """Keep only rows logged at env steps <= step (what the checkpoint knows about)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        rows = f.read().splitlines()
    head, body = (rows[:1], rows[1:]) if header else ([], rows)
    sep = "," if header else " "
    kept = [r for r in body if r and int(r.split(sep)[0]) <= step]
    with open(path, "w") as f:
        f.write("".join(f"{r}\n" for r in head + kept))


def wait_until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.time() + timeout_s
    while not condition():
        if time.time() > deadline:
            sys.exit(f"error: waited {timeout_s} s for the test to go on")
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    args = parse(argv)
    agent = os.path.basename(argv[0])[len("run_"):-len(".py")]
    run_name = args.run_name or f"{args.intervention}-utd{args.utd}-seed{args.seed}"
    run_dir = os.path.join(args.logdir, agent, args.env, run_name)
    seeds = range(args.seed, args.seed + args.num_seeds)
    if args.dry_run:
        time.sleep(args.dry_run_s)
        print(f"settings checked; {run_dir} would be trained")
        return 0
    if os.path.exists(os.path.join(run_dir, "done.json")):
        return 0
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    start = latest_checkpoint(ckpt_dir)
    if args.resume == "must" and start == 0:
        print(f"{argv[0]}: --resume=must but no checkpoint in {ckpt_dir}", file=sys.stderr)
        return 1
    if args.resume == "never" and start > 0:
        print(f"{argv[0]}: --resume=never but {run_dir} holds a run", file=sys.stderr)
        return 1
    if start > 0:
        with open(os.path.join(run_dir, "resumes.txt"), "a") as f:
            f.write(f"{start}\n")
    cut_back(os.path.join(run_dir, "eval.csv"), start, header=True)
    for seed in seeds:
        cut_back(os.path.join(run_dir, f"{seed}.txt"), start, header=False)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({**vars(args), "agent": agent, "run_name": run_name}, f)
    for name, header in (("train.csv", "env_step,seed,metric,value"),
                         ("diagnostics.csv", "env_step,seed,network,layer,metric,value"),
                         ("eval.csv", "env_step,seed,return,wall_time")):
        path = os.path.join(run_dir, name)
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(header + "\n")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print(f"fake {agent}: {run_dir} from step {start}", file=sys.stderr, flush=True)
    print(f"cores {','.join(map(str, sorted(os.sched_getaffinity(0))))} "
          f"PJRT_NPROC={os.environ.get('PJRT_NPROC', '')}", flush=True)
    for step in range(start + 1, args.max_steps + 1):
        time.sleep(args.step_s)
        if step == args.fail_at and (not args.fail_while_exists
                                     or os.path.exists(args.fail_while_exists)):
            print(f"RuntimeError: simulated failure at env step {step}", file=sys.stderr)
            return 1
        if step % args.eval_every == 0:
            with open(os.path.join(run_dir, "eval.csv"), "a", newline="") as f:
                writer = csv.writer(f)
                for seed in seeds:
                    writer.writerow([step, seed, score(args, seed, step), time.time()])
            for seed in seeds:
                with open(os.path.join(run_dir, f"{seed}.txt"), "a") as f:
                    f.write(f"{step} {score(args, seed, step)}\n")
        if step % args.checkpoint_every == 0:
            tmp = os.path.join(ckpt_dir, f".tmp_{step}")
            with open(tmp, "w") as f:
                f.write(str(step))
            os.replace(tmp, os.path.join(ckpt_dir, f"step_{step}"))
            if stop and step < args.max_steps:
                wait_until(lambda: not os.path.exists(args.stop_hold_file))
                print(f"error: stopped by SIGTERM at env step {step}, after a checkpoint there "
                      f"({len(stop)} SIGTERM)", file=sys.stderr)
                return 143
        if step == args.hold_at and (not args.hold_file or os.path.exists(args.hold_file)):
            wait_until(lambda: stop)
    with open(os.path.join(run_dir, "done.json"), "w") as f:
        json.dump({"env_step": args.max_steps}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
