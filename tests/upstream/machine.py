"""A stand-in for the GPU that examples query while tracing.

Persistent kernels size their grid from `cutlass.utils.HardwareInfo` (SM count,
active clusters), which asks the CUDA driver. Without a GPU the harness answers
with the numbers of a typical part of the target architecture; they become
compile-time constants, the same under both decorators. Some compile helpers
also initialise a CUDA context first, which a compile does not need.
"""
from __future__ import annotations

import contextlib

# SM count and L2 size of one typical part per target: H100 SXM, B200, B300, RTX 5090.
_PARTS = {"sm_90a": (132, 50 << 20), "sm_100a": (148, 126 << 20), "sm_103a": (148, 126 << 20),
          "sm_120a": (170, 96 << 20)}


def fake_hardware_info(arch: str):
    sms, l2_bytes = _PARTS[arch]

    class HardwareInfo:
        def __init__(self, device_id: int = 0) -> None:
            self.device_id = device_id

        def get_max_active_clusters(self, cluster_size: int, *args, **kwargs) -> int:
            return sms // cluster_size

        def get_device_multiprocessor_count(self) -> int:
            return sms

        def get_l2_cache_size_in_bytes(self) -> int:
            return l2_bytes

    return HardwareInfo


@contextlib.contextmanager
def no_gpu(arch: str):
    """Replace `HardwareInfo` where examples and the DSL's helpers look it up; make
    `cutlass.cuda.initialize_cuda_context` do nothing."""
    import cutlass.cuda
    import cutlass.utils
    import cutlass.utils.hardware_info

    fake = fake_hardware_info(arch)
    saved = (cutlass.utils.HardwareInfo, cutlass.utils.hardware_info.HardwareInfo,
             cutlass.cuda.initialize_cuda_context)
    cutlass.utils.HardwareInfo = cutlass.utils.hardware_info.HardwareInfo = fake
    cutlass.cuda.initialize_cuda_context = lambda *args, **kwargs: None
    try:
        yield
    finally:
        (cutlass.utils.HardwareInfo, cutlass.utils.hardware_info.HardwareInfo,
         cutlass.cuda.initialize_cuda_context) = saved
