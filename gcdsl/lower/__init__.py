"""The lowering: what desugared kernels call, and the checks that run before them.

A map of the package. Each kind of parameter has a form the DSL already knows (kept
while only trace-time indices reach it), a host-side lowered form (what the launch
passes) and an in-kernel form (what the traced body indexes). The names say which:
`Dsl...` the DSL's form, `Packed...` lowered on the host, `...View` lowered in the kernel.

| parameter | DSL's form, in the kernel | lowered, on the host | lowered, in the kernel |
| --- | --- | --- | --- |
| `List[cute.CopyAtom]` (`descriptors.py`) | `DslDescriptorList` | `PackedDescriptorList`: template + blob | `DescriptorListView`: template + blob address |
| `List[cute.Tensor]` (`tensor_lists.py`) | `DslTensorList` | `PackedTensorList`: one Int64 table | `TensorListView`: a view of the table |
| grid-constant table (`grid_constant.py`) | - | `GridConstantTensor` (the user's object) | `GridConstantParam`, viewed by `table_view` |

The other modules:

- `carried.py`: `Carried`, the DSL's protocol for objects traced code carries as IR values
  (to a kernel, through a dynamic loop), written once for the lowered forms above;
- `runtime.py`: the `__gcdsl__` namespace desugared kernels call, and nothing else;
- `launch_context.py`: what the host knows about the launch being traced, and
  `NeedsLowering`, which stops a trace when a runtime index reaches a list in the DSL's form;
- `lists.py`: what holds for every list parameter (slices with trace-time bounds);
- `tensor_maps.py`, `tensor_map_encoder.py`: `TensorMapTable` (descriptors encoded on the
  host with `cuTensorMapEncodeTiled`, cached) and `tma_desc_ptr`;
- `param_budget.py`: every argument sized as the CUDA ABI lays it out, against the
  32,764-byte limit;
- `_dsl.py`: every private CuTe DSL detail the others use, pinned by
  `tests/test_dsl_assumptions.py`.

`docs/architecture.md` tells the life of a kernel through these.
"""
