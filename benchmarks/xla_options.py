"""The SAC update under other XLA:CPU options, or with its seeds split over host devices.

    python benchmarks/xla_options.py               # the sets below, 2 rounds (several minutes)
    python benchmarks/xla_options.py --options="--xla_cpu_use_onednn=true" --devices=1
    python benchmarks/xla_options.py --rounds=1 --seeds 4

XLA reads XLA_FLAGS once per process, so every set runs in a fresh process of this script
(`--child`), which measures the float32 matmul peak, the critics' 256x256 hidden layer's
matmuls alone, and the seed-vmapped UTD-8 update (humanoid dimensions) in seed-updates/s and
as a fraction of that peak. The framework's own options (`experiment.xla_flags`) are added to
every set, as training adds them. With 2 devices (`--xla_force_host_platform_device_count=2`)
the seed axis is sharded over them, so each device runs the update of its half of the seeds,
at the same time as the other. A process that dies is reported with its exit status, after
what it measured before: with the oneDNN set, XLA gives oneDNN fusions of two summed products
(such as the policy heads' input gradients), whose compilation fails ("partition compile
failed"), and the process ends with SIGILL. The sets alternate over rounds, since this
machine's speed drifts by several percent.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict

from recording import record

DEFAULT_SETS = (  # (what, extra XLA_FLAGS, host devices)
    ("the framework's options", "", 1),
    ("seeds sharded over 2 host devices", "", 2),
    ("2 host devices, no multi-threaded Eigen", "--xla_cpu_multi_thread_eigen=false", 2),
    ("oneDNN matmuls", "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot",
     1),
)


def child(seed_counts: list[int]) -> None:
    """Measure in this process (its XLA_FLAGS already set), printing each result as it comes
    as a JSON line, so that what was measured before a crash still reaches the parent."""
    import jax
    from bench_utils import critic_layer_flops, matmul_peak, update_throughput
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from agents import make_agent

    def report(**result):
        print("RESULT " + json.dumps(result), flush=True)

    peak = matmul_peak()[0]
    devices = jax.devices()
    report(peak=peak, devices=len(devices))
    for seeds in seed_counts:
        report(seeds=seeds, hidden_layer=critic_layer_flops(seeds, 256) / peak)
    agent = make_agent("sac")
    for seeds in seed_counts:
        if seeds % len(devices):
            continue
        sharding = None
        if len(devices) > 1:
            sharding = NamedSharding(Mesh(devices, ("seeds",)), PartitionSpec("seeds"))
        speed = update_throughput(agent, 67, 21, seeds, utd=8, batch=256, sharding=sharding)
        report(seeds=seeds, update=speed.rate, fraction=speed.flops_per_s / peak)


def run_set(options: str, devices: int, seed_counts: list[int]) -> tuple[list[dict], str]:
    """One child process's results, and why it ended early ("" when it did not)."""
    flags = options + (f" --xla_force_host_platform_device_count={devices}" if devices > 1
                       else "")
    env = {**os.environ, "XLA_FLAGS": " ".join([os.environ.get("XLA_FLAGS", ""), flags]).strip(),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", "--seeds", *map(str, seed_counts)],
        env=env, capture_output=True, text=True, check=False)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    if proc.returncode == 0:
        return results, ""
    lines = proc.stderr.strip().splitlines() or ["no output"]
    errors = [line for line in lines if re.match(r"[FE]\d{4} ", line) or "rror" in line
              or "failed" in line]
    last = (errors or lines)[-1][:200]
    status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return results, f"died ({status}): {last}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--options", action="append",
                        help="XLA_FLAGS to try (repeatable); default: the sets in this file")
    parser.add_argument("--devices", type=int, default=1,
                        help="host devices for every --options set (the seed axis is split)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4],
                        help="seed counts at which the update is timed")
    parser.add_argument("--rounds", type=int, default=2,
                        help="times every set runs, alternating with the others")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.seeds)
        return
    if args.devices < 1 or args.rounds < 1 or min(args.seeds) < 1:
        parser.error("--devices, --rounds and --seeds must be >= 1")
    sets = DEFAULT_SETS if args.options is None else [
        (f"set {i}", options, args.devices) for i, options in enumerate(args.options, 1)]
    print(f"SAC update, UTD 8, batch 256, humanoid dimensions; base XLA_FLAGS: "
          f"{os.environ.get('XLA_FLAGS') or '(none)'} plus the framework's options")
    measured = defaultdict(list)  # (metric, unit) -> one value per round
    for round_ in range(1, args.rounds + 1):
        for what, options, devices in sets:
            results, died = run_set(options, devices, args.seeds)
            print(f"round {round_}, {what} [{options or 'no extra options'}; "
                  f"{devices} device(s)]:")
            for r in results:
                where = f"[{options or 'no extra options'}; {devices} device(s)]"
                if "peak" in r:
                    print(f"  matmul peak {r['peak'] / 1e9:.0f} GFLOP/s")
                    measured[(f"matmul peak (float32) {where}", "GFLOP/s")].append(r["peak"] / 1e9)
                elif "hidden_layer" in r:
                    print(f"  {r['seeds']} seed(s): the critics' hidden layer's matmuls alone "
                          f"{r['hidden_layer']:.1%} of the peak")
                    measured[(f"{r['seeds']} seed(s), the critics' hidden layer's matmuls alone "
                              f"{where}", "% of matmul peak")].append(100 * r["hidden_layer"])
                else:
                    print(f"  {r['seeds']} seed(s): update {r['update']:.0f} seed-updates/s = "
                          f"{r['fraction']:.1%} of the peak")
                    what = f"SAC update, UTD 8, {r['seeds']} seed(s) {where}"
                    measured[(what, "seed-updates/s")].append(r["update"])
                    measured[(what, "% of matmul peak")].append(100 * r["fraction"])
            skipped = [s for s in args.seeds if s % devices]
            if skipped:
                print(f"  update not run for {skipped} seed(s): they do not split over "
                      f"{devices} devices")
            if died:
                print(f"  {died}", flush=True)
    record("xla_options", [(f"{metric} (median of {len(values)} rounds)",
                            statistics.median(values), unit)
                           for (metric, unit), values in measured.items()])


if __name__ == "__main__":
    main()
