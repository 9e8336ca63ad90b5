"""A small grouped GEMM for compute-sanitizer: every kernel variant once, verified.

    compute-sanitizer --tool memcheck  python -m tests.kernels.grouped_mm_small
    compute-sanitizer --tool racecheck python -m tests.kernels.grouped_mm_small
    compute-sanitizer --tool synccheck python -m tests.kernels.grouped_mm_small

`offs` on the GPU; groups of 0, 1, 129 and 64 rows (a pair of CTAs with an idle second CTA, a group
with a partial tile), N and K not multiples of the tile; single CTAs and pairs,
both tiles, bf16 and fp32 outputs. Exits 1 if a result is wrong.
"""
import sys

import torch

from gcdsl.ops.grouped_mm import grouped_mm_into, pick_tile_n


def main() -> int:
    torch.manual_seed(0)
    rows = [0, 1, 129, 64]
    ends = torch.tensor(rows).cumsum(0).to(torch.int32)
    ok = True
    for n, k in ((392, 200), (328, 136)):  # 128x256 and 128x128 tiles (gcdsl.ops.grouped_mm.pick_tile_n)
        a = torch.randn(int(ends[-1]) + 3, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(len(rows), n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
        ref = torch.cat([a[s:e].float() @ b[g].float()
                         for g, (s, e) in enumerate(zip([0] + ends[:-1].tolist(), ends.tolist()))])
        for out_dtype in (torch.bfloat16, torch.float32):
            for cluster_m in (1, 2):
                out = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=out_dtype)
                grouped_mm_into(a, b, ends.cuda(), out, tile_n=pick_tile_n(n), cluster_m=cluster_m)
                torch.cuda.synchronize()
                end = int(ends[-1])
                err = ((out[:end].float() - ref).abs().max() / ref.abs().max()).item()
                good = err <= 1e-2 and bool(torch.isnan(out[end:]).all())
                ok &= good
                print(f"N={n} K={k} out={out_dtype} cluster_m={cluster_m}: rel err {err:.1e} "
                      f"{'PASS' if good else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
