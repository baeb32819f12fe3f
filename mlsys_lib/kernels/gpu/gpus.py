"""Theoretical occupancy of a kernel on a named GPU, as the CUDA Occupancy Calculator computes it.

    occupancy(256, registers_per_thread=32, shared_bytes_per_block=0, gpu="A100").fraction   # 1.0
    occupancy(256, registers_per_thread=64, shared_bytes_per_block=0, gpu="A100").fraction   # 0.5, registers

An SM holds as many blocks as the tightest of four limits allows: resident blocks, resident warps,
the register file (each warp's registers rounded up to the allocation unit) and shared memory (each
block's bytes plus the runtime's reserved 1 KiB, rounded up to the allocation unit). Occupancy is
the resident warps over the most an SM can hold. It is *theoretical*: achieved occupancy on a GPU
is lower when the grid is small or blocks finish unevenly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import ceil_div

WARP_SIZE = 32


@dataclass(frozen=True)
class GpuSpec:
    """Per-SM limits of one GPU (compute capability ``sm``); memory sizes in bytes, registers 32-bit."""

    name: str
    sm: str
    max_threads_per_block: int
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    register_allocation_unit: int  # registers, allocated per warp
    shared_per_sm: int
    max_shared_per_block: int  # with the opt-in to large dynamic shared memory; 48 KiB static
    shared_allocation_unit: int
    shared_reserved_per_block: int  # taken by the CUDA runtime from every block since sm_80
    sms: int  # streaming multiprocessors on the board
    bandwidth: float  # peak global-memory bandwidth [byte/s], datasheet
    fp32_flops: float  # peak FP32 throughput [FLOP/s] (FMA = 2 FLOPs), datasheet


# Sources: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per
# Compute Capability" (8.0 and 9.0: 32 resident blocks, 64 resident warps, 2048 threads, 64K 32-bit
# registers per SM, 255 registers per thread, shared memory per SM 164 KB (8.0) and 228 KB (9.0),
# per block 163 KB and 227 KB, 1 KB reserved per block), and the CUDA Occupancy Calculator's
# "GPU Data" sheet (register allocation unit 256 per warp, shared-memory allocation unit 128 bytes).
# Boards (NVIDIA's datasheets, SXM versions): A100 80GB 108 SMs, 2039 GB/s, 19.5 TFLOP/s FP32; H100
# 132 SMs, 3.35 TB/s, 67 TFLOP/s; H200 the same GH100 chip (132 SMs, 67 TFLOP/s) with 4.8 TB/s HBM3e.
GPUS = {
    "A100": GpuSpec("A100", "sm_80", 1024, 2048, 64, 32, 65536, 255, 256,
                    164 * 1024, 163 * 1024, 128, 1024, 108, 2039e9, 19.5e12),
    "H100": GpuSpec("H100", "sm_90", 1024, 2048, 64, 32, 65536, 255, 256,
                    228 * 1024, 227 * 1024, 128, 1024, 132, 3350e9, 67e12),
    "H200": GpuSpec("H200", "sm_90", 1024, 2048, 64, 32, 65536, 255, 256,
                    228 * 1024, 227 * 1024, 128, 1024, 132, 4800e9, 67e12),
}


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM for one launch configuration, and which limit binds.

    ``limited_by`` names every limit that allows no more than ``active_blocks``: some of
    "blocks", "warps", "registers", "shared memory".
    """

    gpu: str
    active_blocks: int
    active_warps: int
    max_warps: int
    limited_by: tuple[str, ...]

    @property
    def fraction(self) -> float:
        """Active warps over the most an SM holds, 0..1."""
        return self.active_warps / self.max_warps


def gpu_spec(gpu: str) -> GpuSpec:
    """The spec of a GPU of :data:`GPUS` by name; KeyError lists the known ones."""
    try:
        return GPUS[gpu]
    except KeyError:
        raise KeyError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}") from None


def occupancy(block_threads: int, registers_per_thread: int, shared_bytes_per_block: int = 0,
              gpu: str = "A100") -> Occupancy:
    """Theoretical occupancy of blocks of ``block_threads`` threads using ``registers_per_thread``
    registers each and ``shared_bytes_per_block`` bytes of shared memory, on ``gpu`` (a key of :data:`GPUS`).

    ValueError for a configuration the GPU cannot launch at all (too many threads, registers or bytes).
    """
    spec = gpu_spec(gpu)
    for name, value in (("block_threads", block_threads), ("registers_per_thread", registers_per_thread),
                        ("shared_bytes_per_block", shared_bytes_per_block)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= block_threads <= spec.max_threads_per_block:
        raise ValueError(f"block_threads must be in 1..{spec.max_threads_per_block} on {gpu}, got {block_threads}")
    if not 1 <= registers_per_thread <= spec.max_registers_per_thread:
        raise ValueError(f"registers_per_thread must be in 1..{spec.max_registers_per_thread} on {gpu}, "
                         f"got {registers_per_thread}")
    if not 0 <= shared_bytes_per_block <= spec.max_shared_per_block:
        raise ValueError(f"shared_bytes_per_block must be in 0..{spec.max_shared_per_block} on {gpu}, "
                         f"got {shared_bytes_per_block}")
    warps_per_block = ceil_div(block_threads, WARP_SIZE)
    registers_per_warp = ceil_div(registers_per_thread * WARP_SIZE, spec.register_allocation_unit) \
        * spec.register_allocation_unit
    shared_per_block = ceil_div(shared_bytes_per_block + spec.shared_reserved_per_block,
                                spec.shared_allocation_unit) * spec.shared_allocation_unit
    limits = {
        "blocks": spec.max_blocks_per_sm,
        "warps": spec.max_warps_per_sm // warps_per_block,
        "registers": (spec.registers_per_sm // registers_per_warp) // warps_per_block,
        "shared memory": spec.shared_per_sm // shared_per_block,
    }
    if limits["registers"] == 0:
        raise ValueError(f"a block of {block_threads} threads with {registers_per_thread} registers each needs "
                         f"{warps_per_block * registers_per_warp} registers; an SM of {gpu} has "
                         f"{spec.registers_per_sm}")
    blocks = min(limits.values())
    return Occupancy(gpu, blocks, blocks * warps_per_block, spec.max_warps_per_sm,
                     tuple(name for name, limit in limits.items() if limit == blocks))
