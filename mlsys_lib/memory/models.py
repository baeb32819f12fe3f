"""Training graphs of three familiar networks, for planning (forward + backward, sizes in bytes).

* :func:`mlp_graph`: linear + ReLU layers; ReLU runs in place on the linear output.
* :func:`transformer_graph`: pre-LayerNorm blocks of attention (Q, K, V, scores, softmax, context,
  projection) and an MLP with GELU, residual connections around both.
* :func:`resnet_graph`: conv + batch norm + ReLU basic blocks with skip connections; every stage halves
  the image and doubles the channels (a 1x1 projection on the skip).

What each op saves for its backward follows what the backward formula reads: a linear layer saves its
input and weight (dX = dY Wᵀ, dW = Xᵀ dY), ReLU and softmax their output, GELU and normalizations
their input, additions nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from .graph import TrainingGraph, TrainingGraphBuilder


def mlp_graph(widths: Sequence[int], batch: int, bytes_per_element: int = 4) -> TrainingGraph:
    """An MLP widths[0] -> widths[1] -> ... -> widths[-1] with ReLU between layers and a loss on top."""
    if len(widths) < 2:
        raise ValueError(f"widths needs at least [in, out], got {list(widths)}")
    b = TrainingGraphBuilder(bytes_per_element)
    h = b.input("x", (batch, widths[0]))
    labels = b.input("y", (batch,))
    last = len(widths) - 1
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:]), start=1):
        W, bias = b.parameter(f"W{i}", (n_in, n_out)), b.parameter(f"b{i}", (n_out,))
        z = b.op(f"z{i}", [h, W, bias], (batch, n_out), saves=[h, W])
        h = z if i == last else b.op(f"a{i}", [z], (batch, n_out), saves=[f"a{i}"], inplace=z, elementwise=True)
    b.op("loss", [h, labels], (), saves=[h, labels])
    return b.build("loss")


def transformer_graph(num_layers: int, batch: int, seq_len: int, hidden: int, heads: int,
                      vocab: int = 1000, bytes_per_element: int = 2) -> TrainingGraph:
    """A stack of ``num_layers`` pre-LN transformer blocks on (batch, seq_len, hidden) activations."""
    b = TrainingGraphBuilder(bytes_per_element)
    tokens, wide, square = (batch, seq_len, hidden), (batch, seq_len, 4 * hidden), (batch, heads, seq_len, seq_len)
    x = b.input("x", tokens)
    labels = b.input("y", (batch, seq_len))

    def linear(name: str, h: str, shape: tuple[int, ...], n_in: int) -> str:
        W = b.parameter(f"{name}.W", (n_in, shape[-1]))
        return b.op(name, [h, W], shape, saves=[h, W])

    def layer_norm(name: str, h: str) -> str:
        gamma, beta = b.parameter(f"{name}.gamma", (hidden,)), b.parameter(f"{name}.beta", (hidden,))
        return b.op(name, [h, gamma, beta], tokens, saves=[h, gamma])

    for layer in range(num_layers):
        p = f"L{layer}."
        n1 = layer_norm(p + "ln1", x)
        q, k, v = (linear(p + name, n1, tokens, hidden) for name in "qkv")
        scores = b.op(p + "scores", [q, k], square, saves=[q, k])
        probs = b.op(p + "softmax", [scores], square, saves=[p + "softmax"], inplace=scores, elementwise=True)
        context = b.op(p + "context", [probs, v], tokens, saves=[probs, v])
        x = b.op(p + "residual1", [x, linear(p + "proj", context, tokens, hidden)], tokens)
        up = linear(p + "fc1", layer_norm(p + "ln2", x), wide, hidden)
        act = b.op(p + "gelu", [up], wide, saves=[up], elementwise=True)
        x = b.op(p + "residual2", [x, linear(p + "fc2", act, tokens, 4 * hidden)], tokens)
    logits = linear("head", layer_norm("ln_f", x), (batch, seq_len, vocab), hidden)
    b.op("loss", [logits, labels], (), saves=[logits, labels])
    return b.build("loss")


def resnet_graph(num_blocks: int, batch: int, channels: int = 16, image: int = 32, stages: int = 4,
                 classes: int = 10, bytes_per_element: int = 4) -> TrainingGraph:
    """A ResNet-like net: a stem, ``num_blocks`` basic blocks in ``stages`` stages, pooling and a classifier."""
    if num_blocks < 1 or stages < 1:
        raise ValueError(f"need at least one block and one stage, got num_blocks={num_blocks}, stages={stages}")
    b = TrainingGraphBuilder(bytes_per_element)
    labels = b.input("y", (batch,))

    def conv_bn(name: str, h: str, c_in: int, shape: tuple[int, ...], kernel: int = 3) -> str:
        W = b.parameter(f"{name}.W", (shape[1], c_in, kernel, kernel))
        conv = b.op(name, [h, W], shape, saves=[h, W])
        gamma, beta = b.parameter(f"{name}.gamma", (shape[1],)), b.parameter(f"{name}.beta", (shape[1],))
        return b.op(f"{name}.bn", [conv, gamma, beta], shape, saves=[conv, gamma])

    def relu(name: str, h: str, shape: tuple[int, ...]) -> str:
        return b.op(name, [h], shape, saves=[name], inplace=h, elementwise=True)

    shape = (batch, channels, image, image)
    h = relu("stem.relu", conv_bn("stem", b.input("x", (batch, 3, image, image)), 3, shape), shape)
    per_stage = -(-num_blocks // stages)
    for i in range(num_blocks):
        p, c_in = f"B{i}.", shape[1]
        if i and i % per_stage == 0 and shape[2] > 1:  # a new stage: half the image, twice the channels
            shape = (batch, 2 * c_in, shape[2] // 2, shape[3] // 2)
        inner = relu(p + "relu1", conv_bn(p + "conv1", h, c_in, shape), shape)
        skip = h if shape[1] == c_in else conv_bn(p + "project", h, c_in, shape, kernel=1)
        h = relu(p + "relu2", b.op(p + "add", [conv_bn(p + "conv2", inner, shape[1], shape), skip], shape), shape)
    pooled = b.op("pool", [h], shape[:2])
    W = b.parameter("fc.W", (shape[1], classes))
    logits = b.op("fc", [pooled, W], (batch, classes), saves=[pooled, W])
    b.op("loss", [logits, labels], (), saves=[logits, labels])
    return b.build("loss")
