"""mlsys_lib: the ML-systems stack of the course, one sub-package per layer.

Layers (lowest first): ``tensor`` (strided arrays and CPU kernels), then the layers the
later labs add on top. A lab may use any *lower* layer as finished infrastructure.
"""

__version__ = "0.1.0"

from .kernels.gpu.device import select_backend as _select_backend

# Numba reads its CUDA-simulator switch once, when numba.cuda is first imported: decide it now.
_select_backend()
