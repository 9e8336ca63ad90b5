"""Blackwell multi-GPU kernels (sm_100a). Their peers' buffers, multicast views and flags are
ordinary tensors to the compiler, so fake ones stand in for what torch's symmetric memory makes."""
from ..catalogue import SM100, Compile, example, skipped
from ..fakes import abc, stream, tensor

D = "cute/blackwell/kernel/distributed/"
SMS = 148
RANKS = 8
MNKL = (512, 512, 256, 1)

for _name in ("all_reduce_simple", "all_reduce_tma", "all_reduce_two_shot_multimem"):
    skipped(f"distributed/{_name}", D + _name + ".py", SM100, "imports nvshmem4py at module level (not installed here)")


@example("distributed/all_reduce_one_shot_lamport", D + "all_reduce_one_shot_lamport.py", SM100)
def _(m):
    import cutlass

    rows, cols = 1024, 1024
    f32 = cutlass.Float32
    # Each peer's buffer: (rows, cols, ranks, ping-pong) over storage (ping-pong, ranks, rows, cols).
    buffers = [tensor(f32, (rows, cols, RANKS, m.PING_PONG_SIZE), order=(1, 0, 2, 3), align=32)
               for _ in range(RANKS)]
    local_in, local_out = (tensor(f32, (rows, cols), align=32) for _ in range(2))
    return Compile(m.AllReduceOneShotLamportKernel(), (0, RANKS, cutlass.Int32(0), local_in, local_out, buffers),
                   {"stream": stream()})


def _flags():
    import cutlass

    m, n = MNKL[:2]
    return [tensor(cutlass.Int32, ((m // 64) * (n // 64) + 160,), align=4) for _ in range(2)]


def _c_like():
    import cutlass

    return abc(MNKL, cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16)[2]


@example("distributed/gemm_all_reduce", D + "distributed_gemm_all_reduce_blackwell.py", SM100)
def _(m):
    import cutlass

    a, b, c = abc(MNKL, cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16)
    gemm = m.Sm100PersistentDenseGemmAllReduceLDMCxSTMCKernel(cutlass.Float32, cutlass.BFloat16, True, (256, 256),
                                                              (2, 1), True, 0, RANKS)
    return Compile(gemm, (a, b, c, _c_like(), _c_like(), *_flags(), stream(), SMS // 2))


@example("distributed/gemm_all_reduce_ldxstmc", D + "distributed_gemm_all_reduce_ldxstmc_blackwell.py", SM100)
def _(m):
    import cutlass

    a, b, c = abc(MNKL, cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16)
    peers = tuple(_c_like() for _ in range(RANKS))
    gemm = m.Sm100PersistentDenseGemmAllReduceLDxSTMCKernel(cutlass.Float32, cutlass.BFloat16, True, (256, 256),
                                                            (2, 1), True, 0, RANKS)
    return Compile(gemm, (a, b, c, peers, _c_like(), *_flags(), stream(), SMS // 2))


@example("distributed/gemm_all_reduce_lamport", D + "distributed_gemm_all_reduce_lamport_blackwell.py", SM100)
def _(m):
    import cutlass

    a, b, _ = abc(MNKL, cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16)
    comm_in = tuple(_c_like() for _ in range(RANKS))
    comm_clear = tuple(_c_like() for _ in range(RANKS))
    gemm = m.Sm100PersistentDenseGemmAllReduceLamportKernel(cutlass.Float32, cutlass.BFloat16, True, (256, 256),
                                                            (2, 1), True, 0, RANKS)
    return Compile(gemm, (a, b, _c_like(), comm_in, comm_clear, _c_like(), stream(), SMS // 2))


@example("distributed/gemm_reduce_scatter", D + "distributed_gemm_reduce_scatter_blackwell.py", SM100)
def _(m):
    import cutlass

    a, b, c = abc(MNKL, cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16)
    flags_per_peer = tuple(_flags()[0] for _ in range(RANKS))
    gemm = m.Sm100PersistentDenseGemmReduceScatterLDMCKernel(cutlass.Float32, cutlass.BFloat16, True, (256, 256),
                                                             (2, 1), True, 0, RANKS)
    return Compile(gemm, (a, b, c, _c_like(), _c_like(), *_flags(), flags_per_peer, stream(), SMS // 2))


@example("distributed/all_gather_gemm", D + "distributed_all_gather_gemm_blackwell.py", SM100)
def _(m):
    import cutlass

    a, b, c = abc(MNKL, cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16)
    gate_flags = tensor(cutlass.Int32, (RANKS,), align=4)
    gemm = m.PersistentDenseGemmKernel(cutlass.Float32, True, (256, 256), (2, 1), True, True)
    return Compile(gemm, (a, b, c, SMS // 2, stream()), {"flag_offset": 1, "gate_a_flags": gate_flags})


@example("distributed/all_gather_sync_devices", D + "distributed_all_gather_gemm_blackwell.py", SM100)
def _(m):
    import cutlass

    counters = tensor(cutlass.Int64, (RANKS,))
    flags = tensor(cutlass.Int32, (RANKS,), align=4)
    return Compile(m.SyncNvlDevices(RANKS), (), {"device_idx": 0, "device_arrival_counters": counters,
                                                 "iteration_flags": flags, "stream": stream()})


@example("distributed/gemm_blockscaled_all_reduce",
         D + "distributed_gemm_blockscaled_all_reduce_ldmcxstmc_blackwell.py", SM100)
def _(m):
    import cutlass
    import cutlass.utils as utils

    from ..fakes import pointer

    fp4, sf, f16 = cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, cutlass.Float16
    major = m.OperandMajorMode
    gemm = m.Sm100PersistentBlockScaleDenseGemmAllReduceLDMCxSTMCKernel(16, (256, 256), (2, 1), f16, 0, RANKS)
    comm = [abc(MNKL, f16, f16, f16)[2] for _ in range(2)]
    problem = tuple(cutlass.Int32(v) for v in MNKL)
    flag_uc, flag_mc = _flags()
    return Compile(gemm, (pointer(fp4), pointer(fp4), pointer(sf, 32), pointer(sf, 32), pointer(f16),
                          (major.K, major.K, utils.LayoutEnum.ROW_MAJOR), problem, SMS // 2, stream()),
                   {"comm_in_multicast_tensor": comm[0], "comm_out_multicast_tensor": comm[1],
                    "barrier_flag_unicast": flag_uc, "barrier_flag_multicast": flag_mc})
