"""Layer 1 of the stack: strided tensors and their CPU kernels.

- :mod:`.strides`  the index arithmetic of strides format (compact strides, broadcasting, reshape, slicing);
- :mod:`.ndarray`  :class:`NDArray`, a strided view over flat storage, with views, compact() and arithmetic;
- :mod:`.kernels`  the Numba kernels NDArray runs (strided copy, elementwise maps, reductions);
- :mod:`.matmul`   matrix multiply in four steps: naive, reordered, tiled, parallel;
- :mod:`.roofline` arithmetic intensity and the roofline model of this machine.
"""

from .matmul import (DEFAULT_TILE, MATMUL_STEPS, matmul_naive, matmul_parallel, matmul_reordered,
                     matmul_tiled)
from .ndarray import DTYPES, NDArray, array, from_numpy, maximum, minimum
from .roofline import (Roofline, arithmetic_intensity, elementwise_flops_bytes, matmul_flops_bytes,
                       measure_roofline, time_best)
from .strides import (broadcast_shape, broadcast_strides, compact_strides, index_to_position, is_compact,
                      reshape_strides, slice_params)

__all__ = [
    "NDArray", "array", "from_numpy", "maximum", "minimum", "DTYPES",
    "compact_strides", "is_compact", "index_to_position", "broadcast_shape", "broadcast_strides",
    "reshape_strides", "slice_params",
    "matmul_naive", "matmul_reordered", "matmul_tiled", "matmul_parallel", "MATMUL_STEPS", "DEFAULT_TILE",
    "arithmetic_intensity", "matmul_flops_bytes", "elementwise_flops_bytes", "Roofline",
    "measure_roofline", "time_best",
]
