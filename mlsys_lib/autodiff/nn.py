"""A small neural-network library on autodiff Tensors: Module, Linear, ReLU, Sequential, MLP."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .elementwise import relu
from .linalg import linear
from .tensor import Tensor, as_tensor


class Module:
    """A callable with parameters: subclasses define ``forward``; Tensors with requires_grad and
    sub-Modules stored as attributes (or in lists of them) are found by ``parameters()``."""

    def forward(self, *args) -> Tensor:
        raise NotImplementedError

    def __call__(self, *args) -> Tensor:
        return self.forward(*args)

    def parameters(self) -> list[Tensor]:
        """Every trainable Tensor of this module and its sub-modules, each once, in attribute order."""
        found: dict[int, Tensor] = {}
        for value in vars(self).values():
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, Module):
                    found.update((id(p), p) for p in item.parameters())
                elif isinstance(item, Tensor) and item.requires_grad:
                    found[id(item)] = item
        return list(found.values())

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None


class Linear(Module):
    """y = x W + b for x (..., in_features) -> (..., out_features), by the fused ``linear`` op.

    W (in_features, out_features) ~ N(0, 2 / in_features) (Kaiming/He init for ReLU nets); b = 0.
    rng: a seed or numpy Generator, for reproducible weights.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 rng: int | np.random.Generator | None = None, dtype=np.float32):
        rng = np.random.default_rng(rng)
        self.in_features, self.out_features = in_features, out_features
        weight = rng.standard_normal((in_features, out_features)) * math.sqrt(2.0 / in_features)
        self.weight = Tensor(weight.astype(dtype), requires_grad=True, name="weight")
        self.bias = Tensor(np.zeros(out_features, dtype), requires_grad=True, name="bias") if bias else None

    def forward(self, x) -> Tensor:
        x = as_tensor(x)
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear: expected input of shape (..., {self.in_features}), got {x.shape}")
        return linear(x, self.weight, self.bias)


class ReLU(Module):
    def forward(self, x) -> Tensor:
        return relu(x)


class Sequential(Module):
    """Applies its modules in order."""

    def __init__(self, *layers: Module):
        self.layers = list(layers)

    def forward(self, x) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(Sequential):
    """Linear layers of ``sizes`` [in, hidden..., out] with ReLU between them (none after the last)."""

    def __init__(self, sizes: Sequence[int], rng: int | np.random.Generator | None = None, dtype=np.float32):
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes needs at least [in, out], got {list(sizes)}")
        rng = np.random.default_rng(rng)
        layers: list[Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            layers += [Linear(n_in, n_out, rng=rng, dtype=dtype), ReLU()]
        super().__init__(*layers[:-1])
