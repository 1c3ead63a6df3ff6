"""Benchmark SingularClip: Newton-Schulz accuracy against a float64 SVD, and each method's cost.

    python benchmarks/clip.py            # full tables (several minutes on 2 CPU cores)
    python benchmarks/clip.py --quick    # small shapes, one seed, few repeats

Prints (1) the relative Frobenius error of Newton-Schulz clipping at c = 2 per iteration count,
on standard Gaussian and on trained-looking anisotropic matrices; (2) times of both methods per
shape, the SVD method's also on a matrix with condition number 4 (clipped through its Gram
matrix), and the SVD method's clip of 10 seeds' 784 x 256 matrices vmapped against one call per
matrix, the extreme singular values of such a stack against all of them, and the orthogonal
init's Q of such Gaussian draws by Householder and by Cholesky QR; (3) the time of
one clip event on a whole SAC and a whole BRO-size network, and of the weight and feature
diagnostics. Times are medians after jit warm-up, with block_until_ready.
"""

from experiment.startup import one_blas_thread
from experiment.xla_flags import apply_xla_flags

apply_xla_flags()  # before JAX starts: the options and the OpenBLAS threads training runs with
one_blas_thread()

# isort: split
import argparse
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from recording import record

from interventions import DEFAULT_NS_STEPS, feature_metrics, singular_clip, weight_metrics
from interventions.newton_schulz import ns_clip_matrices
from interventions.singular_clip import svd_clip_matrices
from networks.common import gaussian_q, thin_q
from numerics.linalg import extreme_singular_values, singular_values

SHAPES = ((128, 128), (256, 256), (512, 512), (1024, 1024), (256, 512))
QUICK_SHAPES = ((128, 128), (256, 512))
OBS_DIM, ACT_DIM = 67, 21  # humanoid
N_CRITICS, N_QUANTILES = 2, 100


def gaussian(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Standard Gaussian entries (m, n), float32."""
    return rng.standard_normal(shape).astype(np.float32)


def anisotropic(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Trained-looking (m, n): a Marchenko-Pastur bulk with input scales spread over two decades,
    plus three rank-one spikes, so singular values fall below 1/2 and above 2."""
    m, n = shape
    scales = np.exp(rng.uniform(np.log(0.1), np.log(10.0), n))
    w = rng.standard_normal(shape) * scales / np.sqrt(m)
    for strength in (10.0, 20.0, 30.0):
        u, v = rng.standard_normal(m), rng.standard_normal(n)
        w += strength * np.outer(u / np.linalg.norm(u), v / np.linalg.norm(v))
    return w.astype(np.float32)


def reference_clip(w: np.ndarray, lower: float, upper: float) -> np.ndarray:
    """U clip(S) V^T in float64 numpy."""
    u, s, vt = np.linalg.svd(w.astype(np.float64), full_matrices=False)
    return (u * np.clip(s, lower, upper)) @ vt


def timed(fn: Callable, *args, repeats: int) -> float:
    """Median seconds of fn(*args) after one warm-up (compile) call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def error_table(shapes, steps_list, seeds: int, c: float) -> list[tuple]:
    """Max over seeds of the relative Frobenius error (%) of Newton-Schulz clipping; returns
    result rows: per kind of matrix and iteration count, the largest error over the shapes."""
    print(f"\nNewton-Schulz relative Frobenius error vs float64 SVD, c = {c}, max of {seeds} seeds")
    print(f"{'matrix':<12}{'shape':<13}" + "".join(f"{f'{k} it':>10}" for k in steps_list))
    rows = []
    for kind in (gaussian, anisotropic):
        worst = np.zeros(len(steps_list))
        for shape in shapes:
            errors = np.zeros((seeds, len(steps_list)))
            for seed in range(seeds):
                w = kind(np.random.default_rng(seed), shape)
                ref = reference_clip(w, 1.0 / c, c)
                for j, steps in enumerate(steps_list):
                    out = np.asarray(ns_clip_matrices(w, 1.0 / c, c, steps), np.float64)
                    errors[seed, j] = np.linalg.norm(out - ref) / np.linalg.norm(ref)
            cells = "".join(f"{100 * e:>9.4f}%" for e in errors.max(axis=0))
            print(f"{kind.__name__:<12}{str(shape):<13}{cells}")
            worst = np.maximum(worst, errors.max(axis=0))
        rows += [(f"Newton-Schulz clip error, c = {c}, {kind.__name__} matrices, {steps} "
                  "iterations, largest over the shapes", 100 * e, "%")
                 for steps, e in zip(steps_list, worst, strict=True)]
    return rows


def conditioned(rng: np.random.Generator, shape: tuple[int, int], cond: float = 4.0) -> np.ndarray:
    """(m, n) with singular values spread geometrically from 3 down to 3 / cond, float32: a
    matrix clipped at every task boundary, which the SVD method clips through its Gram matrix."""
    m, n = shape
    k = min(m, n)
    u = np.linalg.qr(rng.standard_normal((m, k)))[0]
    v = np.linalg.qr(rng.standard_normal((n, k)))[0]
    return ((u * np.geomspace(3.0, 3.0 / cond, k)) @ v.T).astype(np.float32)


def method_times(shapes, repeats: int, c: float) -> list[tuple]:
    """Milliseconds per matrix for the SVD clip of a Gaussian matrix (square ones are
    ill-conditioned) and of one with condition number 4, and for the Newton-Schulz clip (default
    steps); returns them as result rows."""
    svd = jax.jit(lambda w: svd_clip_matrices(w, 1.0 / c, c))
    ns = jax.jit(lambda w: ns_clip_matrices(w, 1.0 / c, c, DEFAULT_NS_STEPS))
    print(f"\nTime per matrix (ms), {jax.devices()[0].platform}, ns_steps = {DEFAULT_NS_STEPS}")
    print(f"{'shape':<14}{'cond':>8}{'svd':>10}{'svd, cond 4':>13}{'newton_schulz':>15}")
    rows = []
    for shape in shapes:
        rng = np.random.default_rng(0)
        w = jnp.asarray(gaussian(rng, shape))
        cond = float(np.linalg.cond(np.asarray(w, np.float64)))
        well = jnp.asarray(conditioned(rng, shape))
        t_svd, t_ns = timed(svd, w, repeats=repeats), timed(ns, w, repeats=repeats)
        t_well = timed(svd, well, repeats=repeats)
        print(f"{str(shape):<14}{cond:>8.3g}{1e3 * t_svd:>10.2f}{1e3 * t_well:>13.2f}"
              f"{1e3 * t_ns:>15.2f}")
        name = f"clip of one {shape[0]} x {shape[1]} matrix"
        rows += [(f"{name}, svd", 1e3 * t_svd, "ms"),
                 (f"{name} with condition number 4, svd", 1e3 * t_well, "ms"),
                 (f"{name}, newton_schulz", 1e3 * t_ns, "ms")]
    return rows


def stack_times(repeats: int, c: float, seeds: int = 10, shape=(784, 256)) -> list[tuple]:
    """The SVD method's clip of one matrix per seed (condition number 4, as between task
    boundaries), vmapped over the seeds, against the same matrices clipped one call at a time:
    what issuing their LAPACK calls side by side saves (numerics/linalg.py)."""
    rng = np.random.default_rng(1)
    w = jnp.asarray(np.stack([conditioned(rng, shape) for _ in range(seeds)]))
    one = jax.jit(lambda w: svd_clip_matrices(w, 1.0 / c, c))
    stacked = jax.jit(jax.vmap(lambda w: svd_clip_matrices(w, 1.0 / c, c)))
    t_one = sum(timed(one, m, repeats=repeats) for m in w)
    t_stacked = timed(stacked, w, repeats=repeats)
    name = f"svd clip of {seeds} {shape[0]} x {shape[1]} matrices with condition number 4"
    print(f"\n{name} (ms): one call each {1e3 * t_one:.2f}, vmapped over seeds "
          f"{1e3 * t_stacked:.2f} ({t_one / t_stacked:.2f}x)")
    return [(f"{name}, one call per matrix, summed", 1e3 * t_one, "ms"),
            (f"{name}, vmapped over seeds", 1e3 * t_stacked, "ms"),
            (f"{name}, one call per matrix over vmapped", t_one / t_stacked, "x")]


def extremes_times(repeats: int, seeds: int = 10, shape=(784, 256)) -> list[tuple]:
    """sigma_max and sigma_min of one matrix per seed (what the diagnostics' and the event
    reports' condition numbers need) against all singular values, on matrices with condition
    numbers 4 (from the Gram matrices' eigenvalues) and 100 (past EXTREMES_GRAM_MAX_COND: SVDs,
    after the Gram matrices' check)."""
    rng = np.random.default_rng(2)
    extremes, full = jax.jit(extreme_singular_values), jax.jit(singular_values)
    rows = []
    for cond in (4.0, 100.0):
        w = jnp.asarray(np.stack([conditioned(rng, shape, cond) for _ in range(seeds)]))
        t_ext, t_full = timed(extremes, w, repeats=repeats), timed(full, w, repeats=repeats)
        name = (f"extreme singular values of {seeds} {shape[0]} x {shape[1]} matrices with "
                f"condition number {cond:g}")
        print(f"\n{name} (ms): extreme_singular_values {1e3 * t_ext:.2f}, singular_values "
              f"{1e3 * t_full:.2f} ({t_full / t_ext:.2f}x)")
        rows += [(f"{name}, extreme_singular_values", 1e3 * t_ext, "ms"),
                 (f"{name}, singular_values", 1e3 * t_full, "ms"),
                 (f"{name}, singular_values over extreme_singular_values", t_full / t_ext, "x")]
    return rows


def init_q_times(repeats: int, seeds: int = 10, shape=(784, 256)) -> list[tuple]:
    """The orthogonal init's Q of one Gaussian draw per seed, vmapped over the seeds, by
    Householder QR (networks.common.thin_q) and by Cholesky QR (networks.common.gaussian_q,
    the route such tall draws take)."""
    z = jax.random.normal(jax.random.key(3), (seeds, *shape))
    householder, cholesky = jax.jit(jax.vmap(thin_q)), jax.jit(jax.vmap(gaussian_q))
    t_h, t_c = timed(householder, z, repeats=repeats), timed(cholesky, z, repeats=repeats)
    name = f"orthogonal init's Q of {seeds} {shape[0]} x {shape[1]} Gaussian draws"
    print(f"\n{name} (ms): Householder QR {1e3 * t_h:.2f}, Cholesky QR {1e3 * t_c:.2f} "
          f"({t_h / t_c:.2f}x)")
    return [(f"{name}, Householder QR", 1e3 * t_h, "ms"), (f"{name}, Cholesky QR", 1e3 * t_c, "ms"),
            (f"{name}, Householder over Cholesky QR", t_h / t_c, "x")]


def dense(rng: np.random.Generator, lead: tuple, n_in: int, n_out: int, bias: bool = True):
    layer = {"kernel": rng.standard_normal(lead + (n_in, n_out)).astype(np.float32) / n_in**0.5}
    if bias:
        layer["bias"] = np.zeros(lead + (n_out,), np.float32)
    return layer


def layer_norm(lead: tuple, n: int) -> dict:
    return {"scale": np.ones(lead + (n,), np.float32), "bias": np.zeros(lead + (n,), np.float32)}


def mlp(rng, lead: tuple, n_in: int, hidden: tuple[int, ...], n_out: int) -> dict:
    """Dense -> LayerNorm per hidden layer, then a Dense head."""
    params, sizes = {}, (n_in,) + hidden
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        params[f"Dense_{i}"] = dense(rng, lead, a, b)
        params[f"LayerNorm_{i}"] = layer_norm(lead, b)
    params[f"Dense_{len(hidden)}"] = dense(rng, lead, sizes[-1], n_out)
    return params


def bronet(rng, lead: tuple, n_in: int, width: int, depth: int, heads: dict[str, int]) -> dict:
    """Dense(width) + LN, `depth` residual blocks of two Dense(width) + LN, then named heads."""
    params = {"Dense_in": dense(rng, lead, n_in, width), "LayerNorm_in": layer_norm(lead, width)}
    for i in range(depth):
        block = {}
        for j in range(2):
            block[f"Dense_{j}"] = dense(rng, lead, width, width)
            block[f"LayerNorm_{j}"] = layer_norm(lead, width)
        params[f"Block_{i}"] = block
    for name, n_out in heads.items():
        params[name] = dense(rng, lead, width, n_out, bias=name != "shift")
    return params


def sac_network(rng, seeds: int) -> dict:
    """SAC on humanoid: actor 256-256 (mean and log-std head), 2 critics and their target."""
    lead = (seeds,)
    critic = mlp(rng, lead + (N_CRITICS,), OBS_DIM + ACT_DIM, (256, 256), 1)
    return {
        "actor": mlp(rng, lead, OBS_DIM, (256, 256), 2 * ACT_DIM),
        "critic": critic,
        "target_critic": jax.tree.map(np.copy, critic),
    }


def bro_network(rng, seeds: int) -> dict:
    """BRO on humanoid: 2 BroNet critics (512, depth 2, 100 quantiles) and their target, actor and
    optimistic actor (256, depth 1)."""
    lead = (seeds,)
    critic = bronet(rng, lead + (N_CRITICS,), OBS_DIM + ACT_DIM, 512, 2, {"head": N_QUANTILES})
    actor_heads = {"mean": ACT_DIM, "log_std": ACT_DIM}
    return {
        "actor": bronet(rng, lead, OBS_DIM, 256, 1, actor_heads),
        "optimistic_actor": bronet(rng, lead, OBS_DIM + ACT_DIM, 256, 1, {"shift": ACT_DIM}),
        "critic": critic,
        "target_critic": jax.tree.map(np.copy, critic),
    }


def count_matrices(params) -> tuple[int, int]:
    leaves = jax.tree_util.tree_leaves_with_path(params)
    kernels = [x for p, x in leaves if p[-1].key == "kernel"]
    return len(kernels), sum(x.size for x in kernels)


def network_times(seeds: int, repeats: int, c: float) -> list[tuple]:
    """One clip event (all weight matrices) per method, and the diagnostics, in ms; returns
    them as result rows."""
    rng = np.random.default_rng(0)
    print(f"\nOne clip event on a whole network (ms), c = {c}, seeds = {seeds}")
    print(f"{'network':<8}{'matrices':>10}{'weights':>11}{'svd':>10}{'newton_schulz':>15}")
    rows = []
    for name, build in (("SAC", sac_network), ("BRO", bro_network)):
        params = jax.tree.map(jnp.asarray, build(rng, seeds))
        row = []
        for method in ("svd", "newton_schulz"):
            clip = jax.jit(lambda p, m=method: singular_clip(p, c, method=m))
            row.append(timed(clip, params, repeats=repeats))
        n, size = count_matrices(params)
        print(f"{name:<8}{n:>10}{size:>11}{1e3 * row[0]:>10.2f}{1e3 * row[1]:>15.2f}")
        rows += [(f"clip event on {name}'s networks, {seeds} seed(s), {method}", 1e3 * t, "ms")
                 for method, t in zip(("svd", "newton_schulz"), row, strict=True)]

    params = jax.tree.map(jnp.asarray, sac_network(rng, seeds))
    online = {"actor": params["actor"], "critic": params["critic"]}
    batch = 256
    features = {
        "actor/Dense_0": jnp.asarray(rng.random((seeds, batch, 256), np.float32)),
        "actor/Dense_1": jnp.asarray(rng.random((seeds, batch, 256), np.float32)),
        "critic/Dense_0": jnp.asarray(rng.random((seeds, N_CRITICS, batch, 256), np.float32)),
        "critic/Dense_1": jnp.asarray(rng.random((seeds, N_CRITICS, batch, 256), np.float32)),
    }
    t_w = timed(jax.jit(weight_metrics), online, repeats=repeats)
    t_f = timed(jax.jit(feature_metrics), features, repeats=repeats)
    print(
        f"\nSAC diagnostics (ms): weight_metrics {1e3 * t_w:.2f}, "
        f"feature_metrics on a {batch}-batch {1e3 * t_f:.2f}"
    )
    return rows + [(f"SAC weight_metrics, {seeds} seed(s)", 1e3 * t_w, "ms"),
                   (f"SAC feature_metrics on a {batch}-batch, {seeds} seed(s)", 1e3 * t_f, "ms")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, one seed")
    parser.add_argument("--seeds", type=int, default=1, help="seed axis of the network params")
    parser.add_argument("--c", type=float, default=2.0, help="clip factor for the error table")
    args = parser.parse_args()

    shapes = QUICK_SHAPES if args.quick else SHAPES
    steps_list = (8, DEFAULT_NS_STEPS) if args.quick else (8, 10, 12, 14, 16, 20, 24)
    rows = error_table(shapes, sorted(set(steps_list)), seeds=1 if args.quick else 3, c=args.c)
    repeats = 3 if args.quick else 10
    rows += method_times(shapes, repeats, c=args.c)
    rows += stack_times(repeats, c=args.c)
    rows += extremes_times(repeats)
    rows += init_q_times(repeats)
    rows += network_times(args.seeds, repeats, c=4.0)
    record("clip", rows)


if __name__ == "__main__":
    main()
