"""LAPACK on stacks of matrices, one matrix at a time, in float32: singular values, and the
per-matrix mappings that SingularClip's eigendecompositions, Cholesky factors and SVDs and the
orthogonal init's QR go through.

jaxlib 0.10.2's CPU LAPACK kernels split a batched call into tasks on XLA's intra-op thread pool and
block a pool thread until they finish; when as many batched calls run at once as the pool has
threads (two on a 2-core machine), every thread waits and the program hangs. A call on a single
matrix runs inline, so these functions call LAPACK on one matrix at a time, also under jax.vmap:
`stacked` hands a function every vmapped matrix at once, and `unrolled` issues one call per
matrix side by side, which XLA's CPU runtime runs on its threads at once when each call's
outputs stay alive to the end (their buffers are then not reused by the next call), and OpenBLAS
runs one thread (launch.startup.one_blas_thread): SingularClip's ten 784 x 256 matrices, one per
vmapped seed, take 22.6 ms that way against 37.2 ms one call each (benchmarks/clip.py). Not
differentiable in reverse mode.
"""

import jax
import jax.numpy as jnp

MAX_UNROLLED = 64  # more matrices than this go through a loop, to bound the program's size
MIN_UNROLLED_ENTRIES = 64 * 64  # smaller matrices, quick to factor, too: they only add compile time


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
