"""gradcheck catches wrong derivatives and names the input; draw_graph draws forward and backward nodes."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import mlsys_lib.autodiff as ad
from mlsys_lib.autodiff import Tensor
from mlsys_lib.autodiff.draw import COLORS


class Square(ad.Op):
    """x², with a VJP or JVP that can be made wrong on purpose."""

    name = "square"

    def __init__(self, vjp_factor=2.0, jvp_factor=2.0):
        self.vjp_factor, self.jvp_factor = vjp_factor, jvp_factor

    def forward(self, x):
        return x * x

    def shape(self, shape):
        return shape

    def vjp(self, g, out, x):
        return (g * x * self.vjp_factor,)

    def jvp(self, tangents, out, x):
        return tangents[0] * x * self.jvp_factor


def test_gradcheck_accepts_a_correct_custom_op():
    x = np.random.default_rng(0).standard_normal((2, 3))
    assert ad.gradcheck(lambda t: ad.apply(Square(), t), [x])


def test_gradcheck_names_the_input_with_a_wrong_vjp():
    rng = np.random.default_rng(0)
    with pytest.raises(AssertionError, match=r"input 1, reverse mode \(VJP\): max abs error"):
        ad.gradcheck(lambda x, y: x * ad.apply(Square(vjp_factor=1.0), y), [rng.standard_normal(3),
                                                                          rng.standard_normal(3)])


def test_gradcheck_catches_a_wrong_jvp():
    with pytest.raises(AssertionError, match=r"input 0, forward mode \(JVP\)"):
        ad.gradcheck(lambda t: ad.apply(Square(jvp_factor=3.0), t), [np.random.default_rng(0).standard_normal(3)])


def _box_colors(figure):
    """The fill colors of the node boxes (the arrows are text-less annotations without a box)."""
    return [text.get_bbox_patch().get_facecolor() for text in figure.axes[0].texts if text.get_bbox_patch()]


def test_draw_graph_shows_forward_nodes():
    x, w = Tensor(np.ones((2, 3))), Tensor(np.ones((3, 4)), requires_grad=True)
    loss = ad.sum(ad.relu(ad.matmul(x, w)))
    figure = ad.draw_graph(loss)
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert isinstance(figure, Figure)
    assert any(label.startswith("matmul\n(2, 4)") for label in labels) and any("relu" in label for label in labels)
    assert to_rgba(COLORS["backward"]) not in _box_colors(figure)


def test_draw_graph_shows_the_backward_graph_in_another_color():
    w = Tensor(np.ones((3, 4)), requires_grad=True)
    loss = ad.sum(ad.tanh(ad.matmul(np.ones((2, 3)), w)))
    loss.backward(create_graph=True)
    assert to_rgba(COLORS["backward"]) in _box_colors(ad.draw_graph(loss))

    x = ad.placeholder((2, 3), "x")
    y = ad.sum(ad.exp(x))
    figure = ad.draw_graph(y, ad.gradients(y, [x]))
    colors = _box_colors(figure)
    assert to_rgba(COLORS["backward"]) in colors and to_rgba(COLORS["forward"]) in colors
    assert any(text.get_text().startswith("placeholder x") for text in figure.axes[0].texts)
