"""`gcdsl.ops.grid_barrier`: which counter each launch of the decode kernel gets. Two
launches that can run at once must never share one; launches on one stream may."""
import types

import pytest
import torch

from gcdsl.ops import grid_barrier


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda as `counter` sees it, with the current stream and whether it is being
    captured set by the test, and a pool of CPU memory."""
    state = types.SimpleNamespace(stream=1, capturing=False, pools_made=0)

    def zeroed_rows(index):
        state.pools_made += 1
        return torch.zeros(grid_barrier.COUNTERS, grid_barrier.COUNTER_INTS, dtype=torch.int32)

    monkeypatch.setattr(grid_barrier, "_pools", {})
    monkeypatch.setattr(grid_barrier, "_zeroed_rows", zeroed_rows)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state.capturing)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda index=None: types.SimpleNamespace(cuda_stream=state.stream))
    return state


def _row(counter: torch.Tensor) -> int:
    return counter.data_ptr() // (grid_barrier.COUNTER_INTS * 4)


def test_eager_calls_on_one_stream_share_a_counter_and_other_streams_get_their_own(fake_cuda):
    device = torch.device("cuda", 0)
    first = grid_barrier.counter(device)
    assert first.shape == (grid_barrier.COUNTER_INTS,) and first.dtype == torch.int32 and (first == 0).all()
    assert grid_barrier.counter(device).data_ptr() == first.data_ptr()
    fake_cuda.stream = 2
    other = grid_barrier.counter(device)
    assert other.data_ptr() != first.data_ptr() and _row(other) != _row(first)  # (a cache line apart)
    fake_cuda.stream = 1
    assert grid_barrier.counter(torch.device("cuda")).data_ptr() == first.data_ptr()  # (device 0, current)
    assert grid_barrier.counter(torch.device("cuda", 1)).data_ptr() != first.data_ptr()  # (a pool a device)
    assert fake_cuda.pools_made == 2


def test_each_captured_call_gets_a_counter_of_its_own(fake_cuda):
    device = torch.device("cuda", 0)
    eager = grid_barrier.counter(device)
    fake_cuda.capturing = True
    captured = [grid_barrier.counter(device) for _ in range(3)]
    pointers = {c.data_ptr() for c in captured}
    assert len(pointers) == 3 and eager.data_ptr() not in pointers
    fake_cuda.capturing = False
    assert grid_barrier.counter(device).data_ptr() == eager.data_ptr()


def test_no_counter_where_none_can_be_given(fake_cuda, monkeypatch):
    """Captured before any eager call (a pool zeroed in the capture would be zeroed at
    each replay) and once every counter is taken: None, and the caller zeroes its own."""
    device = torch.device("cuda", 0)
    fake_cuda.capturing = True
    assert grid_barrier.counter(device) is None and fake_cuda.pools_made == 0
    fake_cuda.capturing = False
    monkeypatch.setattr(grid_barrier, "COUNTERS", 3)
    assert grid_barrier.counter(device) is not None
    fake_cuda.capturing = True
    assert grid_barrier.counter(device) is not None and grid_barrier.counter(device) is not None
    assert grid_barrier.counter(device) is None
    fake_cuda.capturing, fake_cuda.stream = False, 7
    assert grid_barrier.counter(device) is None
