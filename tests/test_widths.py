"""Layers that keep all their neurons (width d_l <= D_k) are skipped: nothing is computed.

Their features, selection and re-weighting are not run, the layer is the teacher's, and its
``LayerInfo`` says ``skipped``; the Taylor pass runs only to the depth and orders of the layers
that are compressed (a kept-whole layer at order 89 must not push the pass to order 89).
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxcompress as jc
from jaxcompress.planning import resolve_widths, skipped_sets


class _Spy(jc.features.DerivativeFeatures):
    """Derivative features that record which layers the driver asks for (at trace time)."""

    calls: list = []

    def __call__(self, params, layers, *, activation, domain, placement=None):
        _Spy.calls.append(list(layers))
        return super().__call__(params, layers, activation=activation, domain=domain,
                                placement=placement)


def _equal(a, b):
    return all(bool(jnp.array_equal(x[n], y[n])) for x, y in zip(a, b, strict=True) for n in x)


def _check_skipped(li, width, order, num_features, coord_dim):
    assert li.skipped and li.num_rows == 0
    assert (li.width_in, li.width_out, li.order, li.num_features, li.coord_dim) == (
        width, width, order, num_features, coord_dim)
    np.testing.assert_array_equal(li.kept, np.arange(width))
    assert int(li.rank) == width and float(li.residual) == 0 and float(li.max_coef) == 1


def test_every_layer_kept_whole_returns_the_teacher_without_features():
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
    _Spy.calls.clear()
    method = jc.Method(_Spy(200), name="spy")  # D_200 = 20,301 >= 32: both layers kept whole
    small, info = jc.compress(teacher, method, activation="sigmoid")
    assert _Spy.calls == []  # no features at all (the order-200 pass would take minutes)
    assert _equal(small, teacher)
    for l, li in enumerate(info.layers, start=1):
        assert li.layer == l
        _check_skipped(li, 32, 200, 20301, 2)
    assert float(info.error_estimate) == 0
    assert "whole" in info.summary()
    # the record survives a round trip
    back = jc.CompressInfo.from_dict(info.to_dict())
    assert [li.skipped for li in back.layers] == [True, True]


def test_a_layer_kept_whole_does_not_raise_the_order_of_the_pass():
    # layer 1: D_40 = 41 >= 30, kept whole; layer 2: D_3 = 4 < 6, compressed at order 3 only
    teacher = jc.init_mlp(jax.random.PRNGKey(1), [1, 30, 6, 1])
    _Spy.calls.clear()
    small, info = jc.compress(teacher, jc.Method(_Spy((40, 3)), name="spy"), activation="tanh")
    assert _Spy.calls == [[2]]
    assert jc.layer_sizes(small) == [1, 30, 4, 1]
    first, second = info.layers
    _check_skipped(first, 30, 40, 41, 1)
    assert not second.skipped and second.num_rows == 4 and second.width_out == 4
    # the kept-whole layer is the teacher's
    np.testing.assert_array_equal(small[0]["kernel"], teacher[0]["kernel"])
    np.testing.assert_array_equal(small[0]["bias"], teacher[0]["bias"])
    assert float(info.error_estimate) < 1e-2


def test_which_layers_are_skipped():
    # static configuration only: width == d_l <= D_k, and in forward order with re-fitting only
    # before the first compressed layer (after it, the re-fit corrects the upstream change)
    sizes, dom = [2, 40, 8, 1], jc.Ball(2, 1.0)

    def skipped(method):
        return skipped_sets(method, sizes, dom, resolve_widths(method, sizes, dom))

    assert skipped(jc.derivative_matching(3)) == (False, True)  # D_3 = 10: 40 > 10 >= 8
    assert skipped(jc.derivative_matching(3, layer_order="forward")) == (False, True)
    assert skipped(jc.collocation(3, layer_order="backward")) == (False, True)
    assert skipped(jc.collocation(3, layer_order="forward")) == (False, False)
    assert skipped(jc.derivative_matching(3, widths=(10, 7))) == (False, False)  # explicit
    assert skipped(jc.derivative_matching(8)) == (True, True)  # D_8 = 45 >= 40
    assert skipped(jc.collocation(8, layer_order="forward")) == (True, True)
    assert skipped(jc.derivative_matching(8, widths=(39, 8))) == (False, True)
    assert skipped(jc.derivative_matching(3, coordinates="bottleneck")) == (False, True)


def test_skip_under_best_of_and_vmap():
    # [2, 40, 8, 1] at k = 3 (D_3 = 10): layer 1 compressed, layer 2 (8 <= 10) kept whole
    teachers = [jc.init_mlp(jax.random.PRNGKey(s), [2, 40, 8, 1]) for s in (2, 3)]
    stack = jax.tree.map(lambda *a: jnp.stack(a), *teachers)
    # a best_of says skipped only where every candidate skipped (traced, not compiled)
    mixed = jc.best_of(jc.derivative_matching(3), jc.collocation(3, layer_order="forward"))
    _, info = jax.eval_shape(lambda p: jc.compress(p, mixed, activation="sigmoid"), teachers[0])
    assert [li.skipped for li in info.layers] == [False, False]
    # derivative features in forward order (C = I: skipped) and collocation in backward order
    # (skipped), under best_of and over a stack of teachers: the record is broadcast
    best = jc.best_of(jc.derivative_matching(3, layer_order="forward"),
                      jc.collocation(3, layer_order="backward"))
    small, info = jax.vmap(lambda p: jc.compress(p, best, activation="sigmoid"))(stack)
    assert [li.skipped for li in info.layers] == [False, True]
    np.testing.assert_array_equal(info.layers[1].kept, np.tile(np.arange(8), (2, 1)))
    assert np.asarray(info.layers[1].rank).tolist() == [8, 8]
    np.testing.assert_array_equal(small[1]["bias"], stack[1]["bias"])
    assert small[1]["kernel"].shape == (2, 10, 8)
