"""gradcheck: compare reverse mode (VJP) and forward mode (JVP) with central differences, in float64.

Central differences (f(x + εv) - f(x - εv)) / 2ε have error O(ε²); in float64 with ε = 1e-6 that
leaves about 1e-8 relative error from rounding, far below any real mistake in a derivative rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .engine import grad
from .forward_mode import jvp
from .tensor import Tensor


def gradcheck(f: Callable[..., Tensor], inputs: Sequence, eps: float = 1e-6, atol: float = 1e-6,
              rtol: float = 1e-5, check_forward: bool = True, seed: int = 0) -> bool:
    """True if f's derivatives match central differences; AssertionError naming the input otherwise.

    f: Tensors -> Tensor of any shape. inputs: arrays; floating ones are cast to float64 and checked,
    integer ones (labels) are held fixed. Reverse mode is checked through a random projection u of the
    output: ∂(u·f)/∂x (one backward pass) against the numerical gradient element by element. Forward
    mode is checked along a random direction v per input: J·v against (f(x + εv) - f(x - εv)) / 2ε.
    """
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(x) for x in inputs]
    arrays = [a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a for a in arrays]
    checked = [i for i, a in enumerate(arrays) if np.issubdtype(a.dtype, np.floating)]

    def tensors(args: Sequence[np.ndarray]) -> list[Tensor]:
        """Fresh leaves; the checked ones require grad, so f may itself differentiate (second order)."""
        return [Tensor(a, requires_grad=i in checked) for i, a in enumerate(args)]

    def value(args: Sequence[np.ndarray]) -> np.ndarray:
        return f(*tensors(args)).numpy()

    def shifted(i: int, step: np.ndarray) -> np.ndarray:
        """Central difference of f along ``step`` added to input i."""
        plus, minus = list(arrays), list(arrays)
        plus[i], minus[i] = arrays[i] + step, arrays[i] - step
        return (value(plus) - value(minus)) / (2 * eps)

    leaves = tensors(arrays)
    out = f(*leaves)
    u = rng.standard_normal(out.shape)
    analytic = grad(out, [leaves[i] for i in checked], grad_outputs=u)
    for i, g in zip(checked, analytic):
        numeric = np.zeros(arrays[i].shape)
        for index in np.ndindex(arrays[i].shape):
            step = np.zeros(arrays[i].shape)
            step[index] = eps
            numeric[index] = np.sum(shifted(i, step) * u)
        _compare(f"input {i}, reverse mode (VJP)", g.numpy(), numeric, atol, rtol)
        if check_forward:
            v = rng.standard_normal(arrays[i].shape)
            tangents = [v if j == i else None for j in range(len(arrays))]
            _, tangent = jvp(f, tensors(arrays), tangents)
            _compare(f"input {i}, forward mode (JVP)", tangent.numpy(), shifted(i, eps * v), atol, rtol)
    return True


def _compare(what: str, analytic: np.ndarray, numeric: np.ndarray, atol: float, rtol: float) -> None:
    if analytic.shape != numeric.shape:
        raise AssertionError(f"gradcheck: {what}: derivative has shape {analytic.shape}, expected {numeric.shape}")
    error = np.abs(analytic - numeric)
    if (error > atol + rtol * np.abs(numeric)).any():
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(error), error.shape))
        raise AssertionError(f"gradcheck: {what}: max abs error {error[worst]:.3e} at index {worst} "
                             f"(analytic {analytic[worst]:.6g}, numeric {numeric[worst]:.6g}; atol {atol}, rtol {rtol})")
