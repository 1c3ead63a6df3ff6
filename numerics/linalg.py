"""LAPACK on stacks of matrices, one matrix at a time, in float32: singular values, the extreme
ones, the Gram matrices' eigendecompositions, and the per-matrix mappings that SingularClip's
eigendecompositions, Cholesky factors and SVDs and the orthogonal init's QRs, Cholesky factors
and triangular inverses go through.

jaxlib 0.10.2's CPU LAPACK kernels split a batched call into tasks on XLA's intra-op thread pool and
block a pool thread until they finish; when as many batched calls run at once as the pool has
threads (two on a 2-core machine), every thread waits and the program hangs. A call on a single
matrix runs inline, so these functions call LAPACK on one matrix at a time, also under jax.vmap:
`stacked` hands a function every vmapped matrix at once, and `unrolled` issues one call per
matrix side by side, which XLA's CPU runtime runs on its threads at once when each call's
outputs stay alive to the end (their buffers are then not reused by the next call), and OpenBLAS
runs one thread (experiment.startup.one_blas_thread): the matrices of every vmapped seed are
factored at once rather than in turn (`python benchmarks/clip.py` times SingularClip's ten
784 x 256 matrices both ways, "svd clip of 10 ..."). Not differentiable in reverse mode.
"""

import jax
import jax.numpy as jnp
import numpy as np

MAX_UNROLLED = 64  # more matrices than this go through a loop, to bound the program's size
MIN_UNROLLED_ENTRIES = 64 * 64  # smaller matrices, quick to factor, too: they only add compile time
# Stacks whose condition numbers are all at most this get their extreme singular values from the
# Gram matrices' extreme eigenvalues, in less time than the SVDs: sigma_min and cond are then
# within 1e-4 of float64's (eps cond^2; tests/test_linalg.py). Past it, the extremes computed
# first are work added to the SVDs' (`python benchmarks/clip.py` times both routes at condition
# numbers 4 and 100, "extreme singular values").
EXTREMES_GRAM_MAX_COND = 32.0
# Matrices with a smaller side than this take SVDs: quick to compute, and the Gram route's
# compilation, slower than the SVDs' in each compiled call that takes it (`python
# benchmarks/compile_times.py --parts=bisection` times both), outweighs what it saves in a short
# run.
EXTREMES_GRAM_MIN_SIDE = 128
_HIGHEST = jax.lax.Precision.HIGHEST


def unrolled(fn, *stacks):
    """fn of single matrices over stacks (B, ...), one call per matrix side by side (a loop past
    MAX_UNROLLED matrices, or below MIN_UNROLLED_ENTRIES entries in the first stack's); every
    output of every call is stacked, so all stay alive to the end."""
    size = stacks[0].shape[0]
    if size > MAX_UNROLLED or stacks[0][0].size < MIN_UNROLLED_ENTRIES:
        return jax.lax.map(lambda xs: fn(*xs), stacks)
    outs = [fn(*(x[i] for x in stacks)) for i in range(size)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def stacked(fn):
    """fn of stacks (B, ...) with one shared leading axis, in and out, made to fold a jax.vmap
    axis into B: under vmap it is called once on the (axis * B, ...) stacks, unbatched, so it
    sees every matrix of every vmapped seed or ensemble member at once."""
    f = jax.custom_batching.custom_vmap(fn)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        args = [x if b else jnp.broadcast_to(x, (axis_size, *x.shape))
                for x, b in zip(args, in_batched, strict=True)]
        out = f(*(x.reshape(-1, *x.shape[2:]) for x in args))
        out = jax.tree.map(lambda y: y.reshape(axis_size, -1, *y.shape[1:]), out)
        return out, jax.tree.map(lambda _: True, out)

    return f


@stacked
def _singular_values(w: jax.Array) -> jax.Array:
    """Singular values of each matrix of a stack (B, m, n), in a loop: unlike the
    eigendecompositions and QRs, jaxlib's SVDs were not seen to run side by side when unrolled,
    which only adds compile time."""
    return jax.lax.map(lambda m: jnp.linalg.svd(m, compute_uv=False), w)


def singular_values(w: jax.Array) -> jax.Array:
    """Singular values (batch..., min(m, n)), descending, of (batch..., m, n) matrices, in
    float32."""
    w = jnp.asarray(w, jnp.float32)
    return _singular_values(w.reshape(-1, *w.shape[-2:])).reshape(*w.shape[:-2], -1)


def _eigh(gram: jax.Array) -> tuple[jax.Array, jax.Array]:
    return tuple(jnp.linalg.eigh(gram))


POWER_ITERATIONS = 4  # of the check in gram_eigh: lambda_max(A^T A) to within about 20 %


def gram(a: jax.Array) -> jax.Array:
    """A^T A of each matrix of a stack (..., m, n), in float32's full precision."""
    return jnp.matmul(jnp.swapaxes(a, -1, -2), a, precision=_HIGHEST)


def _gram_check(a: jax.Array, max_cond: float) -> tuple[jax.Array, jax.Array]:
    """(gram, maybe_conditioned): the Gram matrices A^T A of a stack (B, m, n), m >= n, and False
    where a Cholesky factor already shows some matrix's condition number to be past max_cond:
    with l <= lambda_max(A^T A), the Rayleigh quotient of a few power-iteration steps,
    A^T A - (l / max_cond^2) I is not positive definite only where lambda_min <= l / max_cond^2
    <= lambda_max / max_cond^2."""
    g = gram(a)
    # A fixed start, a constant of the program: no random draw to compile.
    start = np.random.default_rng(0).standard_normal((a.shape[-1], 1)).astype(np.float32)
    x = jnp.broadcast_to(jnp.asarray(start, a.dtype), (*g.shape[:-1], 1))
    for _ in range(POWER_ITERATIONS):
        x = jnp.matmul(g, x, precision=_HIGHEST)
        x = x / jnp.linalg.norm(x, axis=-2, keepdims=True)
    lam_max_below = jnp.sum(x * jnp.matmul(g, x, precision=_HIGHEST), axis=(-2, -1))
    shift = (lam_max_below / max_cond**2)[:, None, None] * jnp.eye(g.shape[-1], dtype=a.dtype)
    chol = unrolled(jnp.linalg.cholesky, g - shift)  # NaN where not positive definite
    return g, jnp.all(jnp.isfinite(jnp.diagonal(chol, axis1=-2, axis2=-1)))


def _within(lam_min: jax.Array, lam_max: jax.Array, max_cond: float) -> jax.Array:
    """Whether every matrix's condition number is at most max_cond, by its Gram matrix's
    extreme eigenvalues (one bool for the stack)."""
    return jnp.all((lam_min > 0) & (lam_max <= max_cond**2 * lam_min))


def gram_eigh(a: jax.Array, max_cond: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(conditioned, lam, v): the eigendecompositions A^T A = V diag(lam) V^T (ascending lam) of
    a stack (B, m, n), m >= n, side by side, and whether every matrix's condition number is at
    most `max_cond` (one bool for the stack). A stack that `_gram_check` shows to be past
    max_cond skips its eigendecompositions (lam and v are then zeros)."""
    g, maybe_conditioned = _gram_check(a, max_cond)
    lam, v = jax.lax.cond(maybe_conditioned, lambda g: unrolled(_eigh, g),
                          lambda g: (jnp.zeros(g.shape[:-1], g.dtype), jnp.zeros_like(g)), g)
    return _within(lam[:, 0], lam[:, -1], max_cond), lam, v


BISECTION_POINTS = 31  # Sturm counts per multisection step: the interval shrinks 32-fold
BISECTION_STEPS = 6  # 32^6 > 2 / eps: from the Gershgorin interval down to float32's rounding


def _tridiagonal_extremes(d: jax.Array, e: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(lambda_min, lambda_max) of symmetric tridiagonal matrices, diagonals d (B, n) and
    off-diagonals e (B, n - 1), by multisection: Sturm counts at BISECTION_POINTS points of each
    eigenvalue's interval at once, from the Gershgorin interval. One short loop, quicker to
    compile than jax.scipy.linalg.eigh_tridiagonal's two calls (`python
    benchmarks/compile_times.py --parts=bisection` times both), at the same accuracy
    (tests/test_linalg.py)."""
    n = d.shape[-1]
    e2 = jnp.square(e)
    pad = jnp.zeros_like(d[:, :1])
    radius = jnp.concatenate([jnp.abs(e), pad], -1) + jnp.concatenate([pad, jnp.abs(e)], -1)
    lo, hi = jnp.min(d - radius, -1), jnp.max(d + radius, -1)
    # The smallest pivot the Sturm recurrence divides by, and a margin for rounding, as LAPACK's
    # sstebz takes them.
    pivmin = jnp.finfo(d.dtype).tiny * jnp.maximum(1.0, jnp.max(e2, -1))
    slack = (2 * n * jnp.finfo(d.dtype).eps * jnp.maximum(jnp.abs(lo), jnp.abs(hi))
             + 4 * pivmin)
    lo = jnp.broadcast_to((lo - slack)[:, None], (d.shape[0], 2))  # for lambda_0 and lambda_n-1
    hi = jnp.broadcast_to((hi + slack)[:, None], (d.shape[0], 2))
    target = jnp.array([0, n - 1], jnp.int32)[:, None]
    frac = jnp.arange(1, BISECTION_POINTS + 1, dtype=d.dtype) / (BISECTION_POINTS + 1)
    piv = pivmin[:, None, None]

    def below(x):
        """How many eigenvalues lie below each x (B, 2, points): the negative pivots of
        T - x I's LDL^T factorisation."""
        def pivot(q, count):
            neg = q < piv
            return jnp.where(neg, jnp.minimum(q, -piv), q), count + neg

        def step(carry, de):
            q, count = carry
            di, e2i = de
            return pivot(di[:, None, None] - x - e2i[:, None, None] / q, count), None

        first = pivot(d[:, 0, None, None] - x, jnp.zeros(x.shape, jnp.int32))
        (_, count), _ = jax.lax.scan(step, first, (d[:, 1:].T, e2.T))
        return count

    def narrow(_, bounds):
        lo, hi = bounds
        x = lo[..., None] + (hi - lo)[..., None] * frac
        left = below(x) <= target  # x is at most the target eigenvalue
        return (jnp.maximum(lo, jnp.max(jnp.where(left, x, -jnp.inf), -1)),
                jnp.minimum(hi, jnp.min(jnp.where(left, jnp.inf, x), -1)))

    lo, hi = jax.lax.fori_loop(0, BISECTION_STEPS, narrow, (lo, hi))
    mid = 0.5 * (lo + hi)
    return mid[:, 0], mid[:, 1]


def _extreme_eigenvalues(gram: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(lambda_min, lambda_max) of each symmetric matrix of a stack (B, n, n): Householder
    tridiagonalisations side by side (every output kept, see `unrolled`), then multisection
    for the two extreme eigenvalues of each tridiagonal matrix, as accurate as a full
    eigendecomposition at a fraction of its time."""
    if gram.shape[-1] == 1:
        return gram[:, 0, 0], gram[:, 0, 0]
    _, d, e, _ = unrolled(jax.lax.linalg.tridiagonal, gram)
    return _tridiagonal_extremes(d, e)


@stacked
def _extremes(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sigma_max, sigma_min) of each matrix of a stack (B, m, n), m >= n: from the Gram
    matrices' extreme eigenvalues when every matrix's condition number is at most
    EXTREMES_GRAM_MAX_COND by them, else from SVDs. No Cholesky check first (gram_eigh's): it
    would spare an ill-conditioned stack the extremes but cost every well-conditioned one, the
    common case, time and compilation."""
    lam_min, lam_max = _extreme_eigenvalues(gram(a))
    conditioned = _within(lam_min, lam_max, EXTREMES_GRAM_MAX_COND)

    def by_gram(a):
        return jnp.sqrt(lam_max), jnp.sqrt(lam_min)

    def by_svd(a):
        s = _singular_values(a)
        return s[:, 0], s[:, -1]

    return jax.lax.cond(conditioned, by_gram, by_svd, a)


def extreme_singular_values(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sigma_max, sigma_min), each (batch...), of (batch..., m, n) matrices, in float32: what a
    condition number needs, faster than `singular_values` where the matrices are large
    (EXTREMES_GRAM_MIN_SIDE) and well conditioned (EXTREMES_GRAM_MAX_COND)."""
    a = jnp.asarray(w, jnp.float32)
    if min(a.shape[-2:]) < EXTREMES_GRAM_MIN_SIDE:
        s = singular_values(a)
        return s[..., 0], s[..., -1]
    if a.shape[-2] < a.shape[-1]:
        a = jnp.swapaxes(a, -1, -2)
    s_max, s_min = _extremes(a.reshape(-1, *a.shape[-2:]))
    return s_max.reshape(a.shape[:-2]), s_min.reshape(a.shape[:-2])
