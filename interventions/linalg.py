"""LAPACK on stacks of matrices, one matrix at a time, in float32: singular values, and the
per-matrix mapping SingularClip's eigendecompositions, Cholesky factors and SVDs go through.

jaxlib 0.10.2's CPU LAPACK kernels split a batched call into tasks on XLA's intra-op thread pool and
block a pool thread until they finish; when as many batched calls run at once as the pool has
threads (two on a 2-core machine), every thread waits and the program hangs. A call on a single
matrix runs inline, so these functions map over the matrices sequentially, also under jax.vmap
(custom_batching.sequential_vmap). Not differentiable in reverse mode.
"""

import jax
import jax.numpy as jnp


@jax.custom_batching.sequential_vmap
def _singular_values(w: jax.Array) -> jax.Array:
    return jnp.linalg.svd(w, compute_uv=False)


def each_matrix(fn, w: jax.Array):
    """fn, a sequential_vmap function of one (m, n) matrix, mapped over the matrices of
    (batch..., m, n) in float32, one at a time."""
    w = jnp.asarray(w, jnp.float32)
    batch = w.shape[:-2]
    flat = w.reshape((-1,) + w.shape[-2:])
    out = jax.vmap(fn)(flat)
    return jax.tree.map(lambda x: x.reshape(batch + x.shape[1:]), out)


def singular_values(w: jax.Array) -> jax.Array:
    """Singular values (batch..., min(m, n)), descending, of (batch..., m, n) matrices."""
    return each_matrix(_singular_values, w)
