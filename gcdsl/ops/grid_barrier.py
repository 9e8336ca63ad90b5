"""Counters for a kernel whose CTAs meet at a grid-wide barrier and which leaves its
counter's low 31 bits zero when it ends (the decode kernel, whose launch flips the top
bit: `MoeDecode.arrive`): one whose low bits are zero when a launch starts needs no
memset, and no kernel, before that launch.

Two launches must never use one counter at once. Launches on one stream run one after
the other, so every eager call on a stream takes that stream's counter. A call captured
into a CUDA graph takes a counter of its own, which the graph keeps for good (a graph's
replays run one after the other too, wherever they are launched). The counters are
rows of one pool a device, zeroed once and outside any capture. Where a device has no
pool yet and the call is being captured, or the pool's counters are all taken,
`counter` gives None: the caller zeroes one of its own in the stream (one more node in
a graph, that is all).
"""
from __future__ import annotations

import threading
from typing import Dict, Optional

import torch

COUNTERS = 4096  # a device's pool: a counter a stream used eagerly, and one a captured call
COUNTER_INTS = 32  # int32 a counter's row holds: 128 bytes, a cache line of its own


class _Pool:
    def __init__(self, index: int) -> None:
        self.rows = _zeroed_rows(index)
        self.of_stream: Dict[int, Optional[torch.Tensor]] = {}  # a stream's handle: its row (None: none left)
        self.taken = 0


def _zeroed_rows(index: int) -> torch.Tensor:
    """A pool's memory on device `index`, zero before a launch on any stream reads it (so
    the current stream waits once for its memset)."""
    rows = torch.zeros(COUNTERS, COUNTER_INTS, dtype=torch.int32, device=torch.device("cuda", index))
    torch.cuda.current_stream(index).synchronize()
    return rows


_pools: Dict[int, _Pool] = {}
_lock = threading.Lock()


def counter(device: torch.device) -> Optional[torch.Tensor]:
    """COUNTER_INTS int32 on `device`, the first with its low 31 bits zero and the others
    zero when work next queued on the current stream runs, and that no launch on another
    stream uses: for a kernel that leaves them so. None where there is no such counter to
    give (above)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    capturing = torch.cuda.is_current_stream_capturing()
    with _lock:
        pool = _pools.get(index)
        if pool is None:
            if capturing:  # (a pool zeroed in the capture would be zeroed again at every replay)
                return None
            pool = _pools[index] = _Pool(index)
        if capturing:
            return _take(pool)
        stream = torch.cuda.current_stream(index).cuda_stream
        if stream not in pool.of_stream:
            pool.of_stream[stream] = _take(pool)
        return pool.of_stream[stream]


def _take(pool: _Pool) -> Optional[torch.Tensor]:
    """A row no launch has used, or None once all are taken."""
    if pool.taken == COUNTERS:
        return None
    pool.taken += 1
    return pool.rows[pool.taken - 1]
