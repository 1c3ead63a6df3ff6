"""networks.layers: flax's Dense and LayerNorm, with gradients arranged for XLA:CPU."""

import collections
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

from networks import layers
from networks.layers import (
    Dense,
    DenseParams,
    LayerNorm,
    add_bias,
    dense_heads,
    matmul,
    normalize,
    scale_shift,
    sum_rows,
)


@pytest.mark.parametrize(
    "shape", [(1, 3), (2, 5), (7, 5), (256, 4), (3, 5, 2), (2, 129, 3), (0, 4)])
def test_sum_rows_matches_numpy(shape):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    expected = x.reshape(-1, shape[-1]).astype(np.float64).sum(0)
    np.testing.assert_allclose(sum_rows(jnp.asarray(x)), expected, rtol=1e-5, atol=1e-5)


class Block(nn.Module):
    """Dense -> LayerNorm -> ReLU -> Dense, with flax's layers or ours."""

    ours: bool

    @nn.compact
    def __call__(self, x):
        dense, norm = (Dense, LayerNorm) if self.ours else (nn.Dense, nn.LayerNorm)
        x = nn.relu(norm(name="LayerNorm_0")(dense(32, name="Dense_0")(x)))
        return dense(3, name="Dense_1")(x)


@pytest.mark.slow
@pytest.mark.parametrize("lead", [(64,), (2, 64), (1,)])
def test_same_parameters_outputs_and_gradients_as_flax(lead):
    x = jax.random.normal(jax.random.key(0), (*lead, 11))
    ours, theirs = Block(True), Block(False)
    params = theirs.init(jax.random.key(1), x)
    assert jax.tree.map(jnp.shape, ours.init(jax.random.key(1), x)) == jax.tree.map(
        jnp.shape, params)
    for got, want in zip(jax.tree.leaves(ours.init(jax.random.key(1), x)),
                         jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(got, want)  # the same initialisation from the same key
    # Perturb scale and shift away from 1 and 0, so their gradients are exercised.
    keys = iter(jax.random.split(jax.random.key(2), 16))
    params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(next(keys), p.shape), params)
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), rtol=1e-5,
                               atol=1e-5)

    def loss(module):
        return jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(module.apply(p, x)))))

    for got, want in zip(jax.tree.leaves(loss(ours)(params)), jax.tree.leaves(loss(theirs)(params)),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class Heads(nn.Module):
    """Two heads of different widths and inits on one input: separate flax Dense layers, or
    ours as one product."""

    joint: bool

    @nn.compact
    def __call__(self, x):
        inits = {"mean": nn.initializers.orthogonal(2.0), "log_std": nn.initializers.orthogonal()}
        widths = {"mean": 3, "log_std": 5}
        if self.joint:
            return dense_heads(x, [DenseParams(widths[n], inits[n], name=n) for n in inits])
        return [nn.Dense(widths[n], kernel_init=inits[n], name=n)(x) for n in inits]


@pytest.mark.slow
@pytest.mark.parametrize("lead", [(64,), (2, 64)])
def test_dense_heads_are_separate_dense_layers(lead):
    x = jax.random.normal(jax.random.key(0), (*lead, 11))
    joint, separate = Heads(True), Heads(False)
    params = separate.init(jax.random.key(1), x)
    ours = joint.init(jax.random.key(1), x)
    assert jax.tree.map(jnp.shape, ours) == jax.tree.map(jnp.shape, params)
    for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(got, want)  # same names, shapes and initialisation
    keys = iter(jax.random.split(jax.random.key(2), 8))
    params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(next(keys), p.shape), params)
    outputs = joint.apply(params, x)
    assert [o.shape for o in outputs] == [(*lead, 3), (*lead, 5)]
    for got, want in zip(outputs, separate.apply(params, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    def grad(module):
        def loss(p, x):
            first, second = module.apply(p, x)
            return jnp.sum(jnp.sin(first)) + jnp.sum(jnp.cos(second))

        return jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)

    for got, want in zip(jax.tree.leaves(grad(joint)), jax.tree.leaves(grad(separate)),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_first_and_second_reverse_derivatives_match_finite_differences():
    jax.config.update("jax_enable_x64", True)
    try:
        x = jax.random.normal(jax.random.key(0), (5, 3), jnp.float64)
        b = jax.random.normal(jax.random.key(1), (3,), jnp.float64)
        s = jax.random.normal(jax.random.key(2), (3,), jnp.float64)
        jax.test_util.check_grads(lambda x, b: jnp.sin(add_bias(x, b)), (x, b), order=2,
                                  modes=["rev"])
        jax.test_util.check_grads(lambda x, s, b: jnp.sin(scale_shift(x, s, b)), (x, s, b),
                                  order=2, modes=["rev"])
        jax.test_util.check_grads(lambda x: jnp.sin(normalize(x, 1e-6)) * jnp.arange(3.0),
                                  (x,), order=2, modes=["rev"])
        for rows in (2, 9):  # the transposed and the direct input gradient
            x = jax.random.normal(jax.random.key(3), (rows, 6), jnp.float64)
            w = jax.random.normal(jax.random.key(4), (6, 7), jnp.float64)
            jax.test_util.check_grads(lambda x, w: jnp.sin(matmul(x, w)), (x, w), order=2,
                                      modes=["rev"])
    finally:
        jax.config.update("jax_enable_x64", False)


def test_batch_gradients_are_not_xla_reductions():
    """The bias, scale and shift gradients compile to additions of row slices, not to XLA's
    reduce (slow on XLA:CPU with this framework's options; see networks/layers.py)."""
    y = jnp.ones((256, 64))
    p = jnp.ones(64)
    for fn in (lambda y, p: add_bias(y, p), lambda y, p: scale_shift(y, p, p)):
        grad = jax.jit(jax.grad(lambda p, fn=fn: jnp.vdot(fn(y, p), y)))
        hlo = grad.lower(p).compile().as_text()
        assert " reduce(" not in hlo, hlo


@pytest.mark.parametrize("units", [48, 80])  # fewer outputs than inputs, more
@pytest.mark.parametrize("x_shape", [(4, 64), (2, 3, 64), (300, 64), (0, 64)])
def test_matmul_gradients_match_autodiff(x_shape, units):
    """Fewer rows than units takes the transposed input gradient on a CPU, more the kernel
    transposed first; fewer outputs than inputs the transposed kernel gradient. Each equals
    autodiff of `x @ kernel`, also vmapped over an ensemble axis as the critics are."""
    x = jax.random.normal(jax.random.key(0), (2, *x_shape))
    kernel = jax.random.normal(jax.random.key(1), (2, 64, units))

    def grads(product):
        loss = lambda x, k: jnp.sum(jnp.sin(product(x, k)))  # noqa: E731
        return jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))(x, kernel)

    for got, want in zip(grads(matmul), grads(lambda x, k: x @ k), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _products(hlo: str) -> list[tuple[str, str]]:
    """Each dot of compiled HLO text: its result shape and its right operand's contracting
    dimensions."""
    return re.findall(r"= (f32\[[\d,]*\])\{[\d,]*\} dot\([^\n]*rhs_contracting_dims=\{(\d+)\}",
                      hlo)


def test_input_gradient_form_on_cpu():
    """The compiled input gradient: `kernel @ g.T`, shaped (in, rows), when the layer sees fewer
    rows than units on a CPU; otherwise `g @ kernel.T`, shaped (rows, in), as a plain product
    of `g` with the kernel transposed beforehand (its right operand contracted on its first
    axis), not XLA's product contracting both operands' last axes."""
    if jax.default_backend() != "cpu":
        pytest.skip("the CPU forms of the input gradient are only used on a CPU")
    kernel = jnp.ones((64, 48))
    for rows, expected in ((8, ("f32[64,8]", "1")), (128, ("f32[128,64]", "0"))):
        x = jnp.ones((rows, 64))
        grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(matmul(x, kernel)))))
        found = _products(grad.lower(x).compile().as_text())
        assert expected in found and (f"f32[{rows},64]", "1") not in found, found


def test_kernel_gradient_form_on_cpu():
    """The compiled kernel gradient of a layer with fewer outputs than inputs: `g.T @ x`, shaped
    (out, in), transposed after; of any other layer `x.T @ g`, shaped (in, out)."""
    if jax.default_backend() != "cpu":
        pytest.skip("the transposed kernel gradient is only used on a CPU")
    x = jnp.ones((128, 16))
    for units, expected, other in ((8, "f32[8,16]", "f32[16,8]"), (64, "f32[16,64]",
                                                                      "f32[64,16]")):
        kernel = jnp.ones((16, units))
        grad = jax.jit(jax.grad(lambda k: jnp.sum(jnp.sin(matmul(x, k)))))
        shapes = [shape for shape, _ in _products(grad.lower(kernel).compile().as_text())]
        assert expected in shapes and other not in shapes, shapes


def test_layer_norm_gradient_matches_flax_on_a_constant_row():
    """A row with zero variance is normalised to zeros by both; their gradients agree too."""
    x = jnp.stack([jnp.full(8, 3.0), jnp.arange(8.0)])
    grads = []
    for module in (LayerNorm(), nn.LayerNorm()):
        params = module.init(jax.random.key(0), x)
        grads.append(jax.grad(
            lambda x, m=module, p=params: jnp.sum(jnp.sin(m.apply(p, x)) * jnp.arange(8.0)))(x))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-5)


def _gradient_ops(block: nn.Module, x: jax.Array, platform: str) -> collections.Counter:
    """StableHLO op counts of the jitted parameter gradient, lowered for `platform` (lowering
    needs no such device), leaving out reductions over one element (reshapes to XLA)."""
    params = block.init(jax.random.key(0), x)
    grad = jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(block.apply(p, x)))))
    text = grad.trace(params).lower(lowering_platforms=(platform,)).as_text()
    text = re.sub(r"stablehlo\.reduce\([^\n]*\(tensor<1x\d+xf32>", "", text)
    return collections.Counter(re.findall(r"stablehlo\.(\w+)", text))


@pytest.mark.parametrize("rows", [2, 64])  # Dense_1 input gradient on a CPU: both forms
def test_other_backends_get_flax_gradients(rows, monkeypatch):
    """Lowered for a GPU, the gradient has flax's products and reductions and none of the CPU
    rules (row-slice sums, the input and kernel gradients' barriers); lowered for a CPU, it has
    them: the CPU rules compile slowly on a GPU for many seeds (networks/layers.py). As in a
    process whose default backend is a GPU (this one's is the CPU's)."""
    monkeypatch.setattr(layers, "default_is_cpu", lambda: False)
    x = jnp.ones((rows, 11))
    ours, theirs = _gradient_ops(Block(True), x, "cuda"), _gradient_ops(Block(False), x, "cuda")
    for op in ("dot_general", "reduce", "slice", "optimization_barrier"):
        assert ours[op] == theirs[op], (op, ours, theirs)
    assert ours["slice"] == 0
    on_cpu = _gradient_ops(Block(True), x, "cpu")
    assert on_cpu["slice"] > 0 and on_cpu["reduce"] < theirs["reduce"]
    # Dense_1's input gradient (either form) and its kernel gradient (3 outputs from 32 inputs)
    assert on_cpu["optimization_barrier"] == 2, on_cpu


def test_a_cpu_process_traces_the_cpu_rules_alone(monkeypatch):
    """With the CPU as the default backend the layers trace no platform-dependent choice
    (which traces both branches), and the gradients are those of that choice on a CPU."""
    x, block = jnp.ones((4, 11)), Block(True)
    params = block.init(jax.random.key(0), x)

    def grad():
        return jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(block.apply(p, x)))))

    monkeypatch.setattr(layers, "default_is_cpu", lambda: True)
    alone = grad()
    assert "platform_index" not in str(alone.trace(params).jaxpr)
    monkeypatch.setattr(layers, "default_is_cpu", lambda: False)
    both = grad()
    assert "platform_index" in str(both.trace(params).jaxpr)
    if jax.default_backend() == "cpu":
        for a, b in zip(jax.tree.leaves(alone(params)), jax.tree.leaves(both(params)),
                        strict=True):
            np.testing.assert_array_equal(a, b)
