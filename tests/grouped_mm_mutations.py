"""Seeded bugs in the grouped GEMM kernel, the expert layer's other kernels (routing,
combine) and the rules that pick the GEMM's configuration, and the tests that must catch each.

    python -m tests.grouped_mm_mutations             # every mutation (racecheck needs a Hopper GPU)
    python -m tests.grouped_mm_mutations rows_plus_one
    python -m tests.grouped_mm_mutations --jobs 6     # six at once
    python -m tests.grouped_mm_mutations --list       # their names

Each mutation is one textual edit of a kernel (`gcdsl/ops/hopper_grouped_gemm/`,
`route_kernel.py`, `combine_kernel.py`, `decode_kernel.py` or `decode_ring.py`) or of
`grouped_mm_rules.py`, in whichever file holds the text, once, in a copy of the tree (the kernel's source is read
from its files, so the copy is what compiles), followed by the tests that must catch it
in that copy, stopping at the first failure: first those that need no GPU (the kernel's
code on simulated threads, `tests/simt.py`, its views and its PTX), then the GPU tests.
A mutation that leaves them green is a hole in the tests: the run exits non-zero. The
seeded races (`SANITIZER_MUTATIONS`) run their tests without a GPU, then
compute-sanitizer's racecheck on the small case, which must report.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

from benchmarks.harness import has_hopper_gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = os.path.join("gcdsl", "ops", "hopper_grouped_gemm")  # the grouped GEMM's package
LAYER_KERNELS = (os.path.join("gcdsl", "ops", "route_kernel.py"), os.path.join("gcdsl", "ops", "combine_kernel.py"),
                 os.path.join("gcdsl", "ops", "decode_kernel.py"), os.path.join("gcdsl", "ops", "decode_ring.py"))
RULES = os.path.join("gcdsl", "ops", "grouped_mm_rules.py")  # (RULE_MUTATIONS)


def kernel_files(root: str = ROOT) -> Dict[str, str]:
    """The kernels' source files under `root`: path: text."""
    paths = sorted(pathlib.Path(root, KERNEL).glob("*.py")) + [pathlib.Path(root, p) for p in (*LAYER_KERNELS, RULES)]
    return {str(path): path.read_text() for path in paths}


def occurrences(old: str, root: str = ROOT) -> Dict[str, int]:
    """Files of the kernel under `root` that hold `old`, with how often."""
    return {path: text.count(old) for path, text in kernel_files(root).items() if old in text}
# The tests that need no GPU (the schedule's and the producer's on a simulated warp, the
# views') come first: they fail within seconds where they can.
ON_A_SIMULATED_WARP = "on_a_simulated_warp"
TESTS = ["tests/test_schedule.py", "tests/test_producer.py", "tests/test_operand_views.py", "tests/test_grouped_mm.py",
         "tests/test_grouped_mm_cases.py", "-x", "-q", "-p", "no:cacheprovider", "-k",
         f"{ON_A_SIMULATED_WARP} or ragged_view or m_tile_rows or edges or clamped or graph or (ragged and 64 and 392) "
         "or cases"]

# name: (text in the kernel, its replacement)
MUTATIONS: Dict[str, Tuple[str, str]] = {
    # the schedule
    "rows_plus_one": ("        length = row_end[group + 1] - start\n        rows_per_step",
                      "        length = row_end[group + 1] - start + 1\n        rows_per_step"),
    "offs_of_next_group": ("offs[cutlass.min(lane * c + j, self.groups - 1)]",
                           "offs[cutlass.min(lane * c + j + 1, self.groups - 1)]"),
    "no_clamp_to_m": ("end = cutlass.min(before, total)", "end = before"),
    # the N-tile-fastest order: its M-step and N-tile swapped; the order ignored
    "n_order_m_step_and_n_tile_swapped": (
        "return group, local // self.n_tiles, local % self.n_tiles, length, start, length",
        "return group, local % self.n_tiles, local // self.n_tiles, length, start, length"),
    "n_order_ignored": ('if cutlass.const_expr(self.config.tile_order == "n"):',
                        'if cutlass.const_expr(self.config.tile_order == "x"):'),
    "partial_last_order_ignored": ('if cutlass.const_expr(self.config.tile_order == "m_partial_last"):',
                                   'if cutlass.const_expr(self.config.tile_order == "x"):'),
    "partial_last_run_one_tile_late": ("if local >= full_steps * self.n_tiles:",
                                       "if local > full_steps * self.n_tiles:"),
    "partial_last_run_at_step_zero": ("m_step, n_tile = full_steps, local - full_steps * self.n_tiles",
                                      "m_step, n_tile = 0, local - full_steps * self.n_tiles"),
    "m_blocks_order_ignored": ('if cutlass.const_expr(self.config.tile_order == "m_blocks"):',
                               'if cutlass.const_expr(self.config.tile_order == "x"):'),
    "m_blocks_last_block_full": ("steps = cutlass.min(m_steps - block * M_BLOCK_STEPS, M_BLOCK_STEPS)",
                                 "steps = cutlass.min(m_steps, M_BLOCK_STEPS)"),
    "m_blocks_block_one_step_short": ("return group, block * M_BLOCK_STEPS + within % steps,",
                                      "return group, block * (M_BLOCK_STEPS - 1) + within % steps,"),
    "scan_without_lane_guard": ("            if lane >= (1 << step):\n                total += other",
                                "            total += other"),
    "row_end_shifted": ("row_end[lane * c + j + 1] = ends[j]", "row_end[lane * c + j] = ends[j]"),
    # claimed tiles (`claims.py`): a claim one tile late (the first claimable tile never
    # taken), every other tile claimed. (One tile early is no bug: a cluster's first tile
    # is then taken twice, and the claims go on to the last.)
    "claims_tile_one_late": ("tile = cute.arch.shuffle_sync(ticket, 0) + self.num_clusters",
                             "tile = cute.arch.shuffle_sync(ticket, 0) + self.num_clusters + 1"),
    "claims_every_other_tile": ("ticket = cute.arch.atomic_add(self.counter, cutlass.Int32(1))",
                                "ticket = cute.arch.atomic_add(self.counter, cutlass.Int32(2))"),
    # the ragged store
    "store_third_coordinate_minus_one": ("mC[(None, None, start + rows)]", "mC[(None, None, start + rows - 1)]"),
    "store_rows_unclipped": ("(total - rows, 0)", "(total - rows - 1, 0)"),
    # the A rows
    "a_from_group_start_plus_one": ("        first_row = start\n", "        first_row = start + 1\n"),
    # ... of a partial M-tile, in short boxes: one box too few, every box into the first rows
    "a_short_boxes_one_too_few": ("(rows_in_tile + A_SHORT_BOX_ROWS - 1) // A_SHORT_BOX_ROWS",
                                  "rows_in_tile // A_SHORT_BOX_ROWS"),
    "a_short_boxes_into_first_rows": ("tAsA_short[(None, box, 0, stage)]", "tAsA_short[(None, 0, 0, stage)]"),
    # the start of each group of an M-major A, checked where offs is read
    "unaligned_group_start_not_checked": ("trap_unless(cutlass.min(previous % align, end - previous) == 0,",
                                          "trap_unless(cutlass.min(previous % align, end - previous) >= 0,"),
    "unaligned_group_end_checked": ("cutlass.min(previous % align, end - previous)",
                                    "cutlass.min(end % align, end - previous)"),
    "unaligned_empty_group_checked": ("cutlass.min(previous % align, end - previous)", "(previous % align)"),
    # the grouped reduction (ragged K) and the batch
    "ragged_k_from_one_column_late": ("return k_tiles, length - k_tiles * tile_k",
                                      "return k_tiles, length - k_tiles * tile_k + 1"),
    "ragged_k_group_start_one_early": ("view[(None, None, start)]", "view[(None, None, start - 1)]"),
    # ... with T contiguous: the plain view's column, the zeroed columns, the check of the ends
    "ragged_k_plain_view_one_k_tile_late": ("(0, start + k_first), view)", "(0, start + k_first + 8), view)"),
    "ragged_k_first_columns_not_zeroed": ("        if columns > 0:\n            mainloop.consumer_wait(read)",
                                          "        if columns > 64:\n            mainloop.consumer_wait(read)"),
    "ragged_k_one_column_too_few_zeroed": ("tile_m * columns, threads", "tile_m * (columns - 8), threads"),
    "ragged_k_group_ends_not_checked": ("cutlass.min(end % align, end - previous)", "cutlass.min(0, end - previous)"),
    "ragged_k_empty_group_keeps_accumulators": ("                acc.fill(0.0)\n                rows_here = rows_here",
                                                "                rows_here = rows_here"),
    "batch_m_and_n_tiles_swapped": ("rest // self.groups, tile % self.n_tiles, total",
                                    "tile % self.n_tiles, rest // self.groups, total"),
    "b_majors_swapped": ("(k, 1, n * k) if b_k_major else (1, n, n * k)", "(1, n, n * k) if b_k_major else (k, 1, n * k)"),
    # the ping-pong consumers
    "pingpong_rows_of_a_cooperative_half": ("            rows_here = rows - m_tile * tile_m\n            k_tiles = self.k_tiles\n"
                                            "            if cutlass.const_expr(self.ragged == \"k\"):\n"
                                            "                k_tiles = (length + tile_k - 1) // tile_k\n            if turn == turn_of:",
                                            "            rows_here = rows - m_tile * tile_m - 64 * turn_of\n            k_tiles = self.k_tiles\n"
                                            "            if cutlass.const_expr(self.ragged == \"k\"):\n"
                                            "                k_tiles = (length + tile_k - 1) // tile_k\n            if turn == turn_of:"),
    # the SwiGLU epilogue
    "swiglu_up_from_the_gate_column": ("index_of[(row, column + tile_n // 2)]", "index_of[(row, column)]"),
    "swiglu_up_half_one_tile_on": ("stride=((k, n // 2 * k, half * k), 1, n * k)", "stride=((k, half * k, half * k), 1, n * k)"),
    # the expert layer in one kernel: the down tiles' producer on the gate-up GEMM's tiles,
    # and a down tile let go one gate-up tile early (a race: caught when it loses)
    "experts_down_loads_on_the_gate_up_tiles": ("sB, tile_end_down, row_end,", "sB, tile_end_up, row_end,"),
    "experts_down_one_gate_up_tile_early": ("target = (rows + rows_per_step - 1) // rows_per_step * tiles\n",
                                            "target = (rows + rows_per_step - 1) // rows_per_step * tiles - 1\n"),
    # ... its down tiles dealt on from the gate-up tiles' deal, every CTA one tile further
    # (one tile of each round dealt to none)
    "experts_down_deal_one_tile_on": ("self.first = (cta + ctas - gate_up_items % ctas) % ctas",
                                      "self.first = (cta + ctas - gate_up_items % ctas) % ctas + 1"),
    # ... the light CTAs' lead of down tiles: stepped as the rest (the lead's later items
    # dealt twice, items after it to nobody), or a heavy CTA starting in the lead
    "experts_down_lead_stepped_round_all": ("return item + self.ctas - self.heavy * _below(item, self.shared)",
                                            "return item + self.ctas"),
    "experts_down_lead_heavy_ctas_start_in_it": ("self.first += self.shared * _below(cta, self.heavy)",
                                                 "self.first += 0 * _below(cta, self.heavy)"),
    # ... its gate-up tiles' A rows gathered from x: the next slot's token, one row too few
    # (with the bytes expected to match), every row into its chunk's first row, every
    # row's index from lane 0
    "experts_rows_token_of_the_next_slot": ("row_index[first_row + lane + 32 * j]",
                                            "row_index[first_row + lane + 32 * j + 1]"),
    "experts_rows_one_too_few": ("return cutlass.min(rows - m_tile * self.tile_m, self.tile_m)\n",
                                 "return cutlass.min(rows - m_tile * self.tile_m, self.tile_m) - 1\n"),
    "experts_rows_into_the_chunks_first_row": ("sA_rows[(None, None, 32 * j + lane, 0, stage)]",
                                               "sA_rows[(None, None, 32 * j, 0, stage)]"),
    "experts_rows_index_from_lane_0": ("kk * self.tile_mnk[2], lane_rows[j])",
                                       "kk * self.tile_mnk[2], cute.arch.shuffle_sync(lane_rows[j], 0))"),
    # ... and the combine in its down tiles' epilogue: a token finished one row early, every
    # slot's row and weight its first slot's (in the sum the combine kernel shares), one
    # count for all of a token's column tiles
    "experts_combine_one_row_early": ("if seen == arrivals - 1:", "if seen == arrivals - 2:"),
    "experts_combine_first_slot_for_all": ("slot = token * top_k + j\n", "slot = token * top_k\n"),
    "experts_combine_one_count_a_token": ("t * self.n_tiles + n_tile, cutlass.Int32(1)",
                                          "t * self.n_tiles + 0, cutlass.Int32(1)"),
    # K splits: each range one k-tile longer (the next range's first counted twice)
    "experts_k_splits_overlap": ("(split + 1) * self.k_tiles // self.split_k - first\n",
                         "(split + 1) * self.k_tiles // self.split_k - first + 1\n"),
    # a staggered tile's k-tiles wrap round at K (a past-K k-tile reads TMA's zeros, and one is never read)
    "experts_stagger_without_wrap": ("        if kk >= k_tiles:\n            kk -= k_tiles\n", ""),
    # the grouped reduction in pairs: a CTA's own M-tile, its own half of B, M-steps of two M-tiles
    "pair_rank_ignored_in_pingpong": ("m_tile = m_step * self.cluster_m + rank  # past",
                                      "m_tile = m_step * self.cluster_m + 0  # past"),
    "ragged_k_pair_both_ctas_load_the_first_half_of_b": (
        "_, tBgB_tile = cpasync.tma_partition(  # in a pair, this CTA's half of the B tile\n"
        "            tma_b, rank,",
        "_, tBgB_tile = cpasync.tma_partition(  # in a pair, this CTA's half of the B tile\n"
        "            tma_b, 0,"),
    # ragged M in pairs: each CTA its half of the B tile (SwiGLU: the gate rows, or the up rows)
    "pair_both_ctas_load_the_first_half_of_b": ("return cpasync.tma_partition(\n            tma_b, rank,",
                                                "return cpasync.tma_partition(\n            tma_b, 0,"),
    "ragged_k_pair_m_steps_not_halved": ("self.fixed_m_steps = self.m_tiles // self.cluster_m",
                                         "self.fixed_m_steps = self.m_tiles // 1"),
    # the combine: the slot's own row, its own weight, every column chunk
    "combine_reads_the_slot_not_its_row": ("(weights[slot]), y[(row_of[slot], (None, column))]",
                                           "(weights[slot]), y[(slot, (None, column))]"),
    "combine_first_slots_weight_for_all": ("cutlass.Float32(weights[slot])",
                                           "cutlass.Float32(weights[token * top_k])"),
    "combine_last_vector_unwritten": ("if column < self.hidden // vector:", "if column < self.hidden // vector - 1:"),
    # the down tiles' hand-off to the store warps: a buffer refilled before its store has
    # read it, written without the proxy fence, given back before the store's read, stored
    # before the consumers wrote it
    "experts_hand_off_into_busy_buffers": ("            hand_off.producer_acquire(handed)\n", ""),
    "experts_hand_off_without_proxy_fence": (
        "            cute.arch.fence_proxy(\"async.shared\", space=\"cta\")  # the writes, visible to TMA\n", ""),
    "experts_buffers_freed_before_the_stores_read": ("        in_flight = 0  # each store's read waited for",
                                                     "        in_flight = 1  # each store's read waited for"),
    "experts_stores_before_the_hand_off": ("                        hand_off.consumer_wait(taken)\n", ""),
    # the expert kernel, started while the routing kernel runs, reading before it has ended
    "experts_no_wait_for_the_routing": ("before anything below reads them.\n        cute.arch.griddepcontrol_wait()\n",
                                        "before anything below reads them.\n"),
    # the routing: the one kernel's counters cleared, a slot's place among its expert's slots
    "route_leaves_the_counters": ("cutlass.range(tidx, zero_count, MAX_SLOTS", "cutlass.range(tidx, 0, MAX_SLOTS"),
    "route_rank_counts_the_slot_itself": ("for before in cutlass.range(tidx, unroll=8):\n                if slot_expert",
                                          "for before in cutlass.range(tidx + 1, unroll=8):\n                if slot_expert"),
    # the decode kernel: its own sort of the slots, the experts it finds, the rows it reads
    # and writes, its barrier and its combine
    "decode_sort_counts_the_slot_itself": ("                if other_slot < slot:\n                    ahead += 1",
                                           "                if other_slot <= slot:\n                    ahead += 1"),
    "decode_active_rank_counts_its_own_expert": ("(starting >> other_slot) & 1 == 1 and other >= 0 and other < expert",
                                                 "(starting >> other_slot) & 1 == 1 and other >= 0 and other <= expert"),
    "decode_slot_count_one_short": ("                same += 1\n", "                same += cutlass.Int32(other_slot > 0)\n"),
    "decode_up_row_of_the_next_column": ("w1[(self.inter + column, (None, vec))]", "w1[(self.inter + column + 1, (None, vec))]"),
    "decode_experts_weights_one_expert_on": ("cutlass.Int64(expert) * (elements", "cutlass.Int64(expert + 1) * (elements"),
    "decode_last_row_of_a_batch_unstored": ("if lane == r and done + r < count:", "if lane == r and done + r < count - 1:"),
    "decode_down_rows_one_block_on": ("first_row = bidx * self.rows\n", "first_row = bidx * self.rows + 1\n"),
    # the barrier's shares: the top bit flipped one CTA early (and the low bits left one for
    # the next launch) or never; the wait on bit 30, which CTA 0's share sets alone
    "decode_barrier_one_cta_short": ("cutlass.Int32(FLIP - (self.ctas - 1))", "cutlass.Int32(FLIP - (self.ctas - 2))"),
    "decode_barrier_one_cta_over": ("cutlass.Int32(FLIP - (self.ctas - 1))", "cutlass.Int32(FLIP - self.ctas)"),
    "decode_barrier_waits_on_the_bit_below": ("return ((before ^ now) >> 31) & 1", "return ((before ^ now) >> 30) & 1"),
    "decode_no_wait_for_the_grid_before": ("        cute.arch.griddepcontrol_wait()  # (the grid before",
                                           "        # ("),
    "decode_combine_first_slots_weight_for_all": ("total += weights[t * k + j] * y[(row_of[t * k + j], row)]",
                                                  "total += weights[t * k] * y[(row_of[t * k + j], row)]"),
    # the down rows staged in shared memory: read as the next expert's, copied a block
    # off, one expert read from shared memory past the ones copied there
    "decode_staged_rows_read_as_the_next_experts": ("staged_rows = self.staged_rows(staged, a)\n",
                                                    "staged_rows = self.staged_rows(staged, a + 1)\n"),
    # ... and their sums reduced together: a lane keeping the lower half, the wrong lane storing
    "decode_reduce_scatter_keeps_the_lower_half": ("keep = cutlass.select_(upper, values[half + j], values[j])",
                                                   "keep = values[j]"),
    "decode_staged_sum_stored_by_the_wrong_lane": ("return lane >> (6 - n.bit_length())",
                                                   "return lane >> (5 - n.bit_length())"),
    "decode_staged_rows_copied_one_row_on": ("rows.iterator + first_row * self.inter",
                                             "rows.iterator + (first_row + 1) * self.inter"),
    "decode_reads_one_expert_past_the_staged": ("                if a < self.staged:", "                if a <= self.staged:"),
    # a build that stages every expert compiling the through-L2 down rows it never runs (its spills)
    "decode_all_staged_compiles_the_l2_path": ("if cutlass.const_expr(self.all_staged):", "if cutlass.const_expr(False):"),
    # the streamed build's ring: a gate-up item's columns one pair on, a down item's rows one
    # item on, the up rows' sums into the gate half, a down item's sums into its expert's
    # first rows, an expert's batches one short (its items miscounted), a buffer refilled
    # before the CTA is done with it
    "decode_ring_gate_up_item_one_pair_on": (
        "column = sources.first_column + item % plan.batch_items * plan.pairs",
        "column = sources.first_column + (item + 1) % plan.batch_items * plan.pairs"),
    "decode_ring_down_item_one_chunk_on": ("(sources.first_row + down % chunks * plan.chunk_rows) * self.inter",
                                           "(sources.first_row + (down + 1) % chunks * plan.chunk_rows) * self.inter"),
    "decode_ring_up_sums_into_the_gate_half": ("table[(step * plan.pairs + row % plan.pairs, row // plan.pairs, segment, r)]",
                                        "table[(step * plan.pairs + row % plan.pairs, 0, segment, r)]"),
    "decode_ring_down_sums_into_the_first_chunks_rows": ("y_row = down % chunks * plan.chunk_rows + row", "y_row = row"),
    "decode_ring_batches_one_short": ("(count + self.batch_rows - 1) // self.batch_rows)", "count // self.batch_rows)"),
    "decode_ring_refilled_before_the_cta_barrier": (
        "                cute.arch.sync_threads()  # the item read: its buffer may take the next\n"
        "                if tidx == 0 and item + plan.stages < total_items:\n"
        "                    self.ring_issue(item + plan.stages, ring, full, sources, up_items)\n",
        "                if tidx == 0 and item + plan.stages < total_items:\n"
        "                    self.ring_issue(item + plan.stages, ring, full, sources, up_items)\n"
        "                cute.arch.sync_threads()  # the item read: its buffer may take the next\n"),
}
# Mutations of the other cases run only the cases' tests (the ragged-M tests compile
# many configurations the mutation does not touch): name: pytest -k expression (in
# tests/test_fused_moe.py and the producer's tests for the expert layer's kernels, in
# CASES_TESTS otherwise)
CASES_TESTS = ["tests/test_schedule.py", "tests/test_producer.py", "tests/test_consumers.py",
               "tests/test_operand_views.py", "tests/test_grouped_mm_host.py", "tests/test_grouped_mm_cases.py",
               "-x", "-q", "-p", "no:cacheprovider", "-k"]
CLAIMS_TESTS = ["tests/test_grouped_mm.py", "-x", "-q", "-p", "no:cacheprovider", "-k", "claimed"]
FUSED_MOE_TESTS = ["tests/test_fused_moe.py", "tests/test_producer.py", "-x", "-q", "-p", "no:cacheprovider", "-k"]
FOCUS: Dict[str, str] = {
    "unaligned_group_start_not_checked": "t_contiguous",
    "unaligned_group_end_checked": "t_contiguous",
    "unaligned_empty_group_checked": "t_contiguous",
    "experts_down_loads_on_the_gate_up_tiles": "walk_its_own_schedule or one_kernel and (float32 or break)",
    "experts_down_one_gate_up_tile_early": "every_gate_up_tile or (one_kernel and (float32 or break))",
    "experts_down_deal_one_tile_on": "down_deal or (one_kernel and (float32 or break))",
    # (the layer tests' small shapes take no lead by default: the options' `down_lead 3` does)
    "experts_down_lead_stepped_round_all": "down_deal or down_lead",
    "experts_down_lead_heavy_ctas_start_in_it": "down_deal or down_lead",
    "experts_rows_token_of_the_next_slot": "gathers_each_tile_row or one_kernel and (float32 or break)",
    "experts_rows_one_too_few": "m_tile_rows or one_kernel and (float32 or break)",
    "experts_rows_into_the_chunks_first_row": "gathers_each_tile_row or one_kernel and (float32 or break)",
    "experts_rows_index_from_lane_0": "gathers_each_tile_row or one_kernel and (float32 or break)",
    "experts_combine_one_row_early": "one_kernel_combine_on_simulated or one_kernel and (float32 or break)",
    # (weigh_and_sum, the combine kernel's, also runs on simulated threads without a GPU)
    "experts_combine_first_slot_for_all": "combine_kernel_on_simulated_threads or one_kernel_combine_on_simulated "
                                          "or one_kernel and (float32 or break)",
    "experts_combine_one_count_a_token": "one_kernel_combine_on_simulated or one_kernel and (float32 or break)",
    "experts_k_splits_overlap": "k_splits",
    "experts_stagger_without_wrap": "stagger",
    **{name: "combine_kernel_on_simulated_threads or combine_kernel_against"
       for name in ("combine_reads_the_slot_not_its_row", "combine_first_slots_weight_for_all",
                    "combine_last_vector_unwritten")},
    "route_rank_counts_the_slot_itself": "route_kernel_on_simulated_threads or route_kernel_agrees",
    "route_leaves_the_counters": "route_kernel_on_simulated_threads or one_kernel and float32",
    # (the sort also caught without a GPU, on a warp simulated with a thread a lane)
    **{name: "decode_route_on_a_simulated_warp or decode_against_float32 and e16_h256_i512 or decode_kernel_replays"
       for name in ("decode_sort_counts_the_slot_itself", "decode_active_rank_counts_its_own_expert",
                    "decode_slot_count_one_short")},
    # (the whole decode kernel also runs on simulated CTAs without a GPU)
    **{name: "decode_kernel_on_simulated_ctas or decode_against_float32 and e16_h256_i512 or decode_kernel_replays"
       for name in ("decode_up_row_of_the_next_column", "decode_experts_weights_one_expert_on",
                    "decode_last_row_of_a_batch_unstored", "decode_down_rows_one_block_on")},
    "decode_combine_first_slots_weight_for_all":
        "decode_combine_on_simulated_threads or decode_against_float32 and e16_h256_i512 or decode_kernel_replays",
    **{name: "decode_kernel_on_simulated_ctas or decode_stages or decode_against_float32 and e16_h256_i512"
       for name in ("decode_staged_rows_read_as_the_next_experts", "decode_staged_rows_copied_one_row_on",
                    "decode_reads_one_expert_past_the_staged")},
    # (also caught without a GPU, by the warp simulated in numpy)
    **{name: "decode_reduce_scatter or decode_stages or decode_against_float32 and e16_h256_i512"
       for name in ("decode_reduce_scatter_keeps_the_lower_half", "decode_staged_sum_stored_by_the_wrong_lane")},
    # (the PTX test reads the shares and the bit waited on; the simulated CTAs and the GPU
    # tests see the low bits left one, and the race; a barrier that never opens traps
    # after 20 s on the GPU, 120 s on simulated CTAs)
    "decode_barrier_one_cta_short": "decode_kernel_streams or decode_kernel_on_simulated_ctas or decode_barrier_holds "
                                    "or decode_kernel_leaves_its_counters",
    "decode_barrier_one_cta_over": "decode_kernel_streams",
    "decode_barrier_waits_on_the_bit_below": "decode_kernel_streams or decode_barrier_holds",
    "decode_all_staged_compiles_the_l2_path": "decode_kernel_spills",
    # (the streamed build also runs on simulated CTAs without a GPU, its PTX read for the refills' order)
    **{name: "decode_kernel_on_simulated_ctas or streamed_decode_kernel_reads or decode_streamed"
       for name in ("decode_ring_gate_up_item_one_pair_on", "decode_ring_down_item_one_chunk_on", "decode_ring_up_sums_into_the_gate_half",
                    "decode_ring_down_sums_into_the_first_chunks_rows", "decode_ring_batches_one_short",
                    "decode_ring_refilled_before_the_cta_barrier")},
    # (topk_ids read before the grid that writes them may be over: the PTX test sees the order)
    "decode_no_wait_for_the_grid_before": "decode_kernel_streams or decode_against_float32 and e16_h256_i512",
    "experts_hand_off_into_busy_buffers": "hand_their_sub_tiles or (one_kernel and (float32 or break))",
    "experts_hand_off_without_proxy_fence": "hand_their_sub_tiles or (one_kernel and (float32 or break))",
    "experts_buffers_freed_before_the_stores_read": "hand_their_sub_tiles or (one_kernel and (float32 or break))",
    "experts_stores_before_the_hand_off": "hand_their_sub_tiles or (one_kernel and (float32 or break))",
    "experts_no_wait_for_the_routing": "waits_for_the_routing or (one_kernel and (float32 or break or replays))",
    "ragged_k_from_one_column_late": "grouped_reduction or offs_is_read",
    "ragged_k_group_start_one_early": "grouped_reduction or offs_is_read",
    "ragged_k_plain_view_one_k_tile_late": "grouped_reduction_loads or t_contiguous_reduction",
    "ragged_k_first_columns_not_zeroed": "columns_before_a_group or t_contiguous_reduction",
    "ragged_k_one_column_too_few_zeroed": "columns_before_a_group or t_contiguous_reduction",
    "ragged_k_group_ends_not_checked": "grouped_reduction_schedule or t_contiguous_reduction",
    "ragged_k_empty_group_keeps_accumulators": "own_accumulators or grouped_reduction",
    "pair_rank_ignored_in_pingpong": "own_m_tile or grouped_reduction_in_pairs or pingpong_pairs",
    "ragged_k_pair_both_ctas_load_the_first_half_of_b": "pairs_ctas_load or grouped_reduction_in_pairs",
    "ragged_k_pair_m_steps_not_halved": "grouped_reduction_in_pairs",
    "pair_both_ctas_load_the_first_half_of_b": "pairs_ctas_load or pairs",
    "batch_m_and_n_tiles_swapped": "batch or (every_layout and 3d3d)",
    "b_majors_swapped": "b_view or (every_layout and 2d3d)",
    "pingpong_rows_of_a_cooperative_half": "own_accumulators or pingpong",
    "swiglu_up_from_the_gate_column": "swiglu",
    "swiglu_up_half_one_tile_on": "swiglu",
}
SANITIZER_MUTATIONS: Dict[str, Tuple[str, str]] = {
    # the ping-pong warpgroups' epilogues through the same sub-tile buffers
    "pingpong_warpgroups_share_sub_tile_buffers": ("first_buffer = turn_of * self.epi_stages",
                                                   "first_buffer = 0 * self.epi_stages"),
    # a claim written into a slot whose last claim not every reader has read
    "claims_published_without_waiting_for_readers": (
        "        cute.arch.mbarrier_wait(self.empty + state.index, state.phase)  # every reader has read the slot\n", ""),
    # the schedule read before every thread knows it is written
    "schedule_unsynchronized": ("        pipeline.pipeline_init_wait(cluster_shape_mn=(cluster_m, 1))  # barriers ready in every CTA\n"
                                "        if cutlass.const_expr(cluster_m > 1):\n"
                                "            cute.arch.sync_threads()",
                                "        if cutlass.const_expr(False):\n            pass"),
}
# The rules that pick a configuration from shapes (`grouped_mm_rules.py`): the host tests
# of the rules must catch each, without a GPU.
RULE_MUTATIONS: Dict[str, Tuple[str, str]] = {
    "rule_pingpong_at_any_n_up_to_512_rows_inclusive": (
        "problem.total < PINGPONG_ANY_N_MAX_ROWS_PER_GROUP * problem.groups",
        "problem.total <= PINGPONG_ANY_N_MAX_ROWS_PER_GROUP * problem.groups"),
    "rule_pingpong_below_a_full_m_tile": ("problem.total >= PINGPONG_TILE_M * problem.groups \\",
                                          "problem.total >= 0 * problem.groups \\"),
    "rule_pingpong_pairs_where_single_ctas_were_asked_for": ("in_pairs = cluster_m != 1 and pick_cluster_m(",
                                                             "in_pairs = True and pick_cluster_m("),
    "rule_pairs_where_the_tile_does_not_fit": (
        "return 2 if m >= rows_per_group * groups and pairs_fit(n, tile_n) else 1",
        "return 2 if m >= rows_per_group * groups else 1"),
    "rule_pingpong_pairs_from_511_rows": ("PINGPONG_PAIR_ROWS_PER_GROUP = 512", "PINGPONG_PAIR_ROWS_PER_GROUP = 511"),
    "rule_cooperative_pairs_from_1024_rows": ("\nPAIR_ROWS_PER_GROUP = 512", "\nPAIR_ROWS_PER_GROUP = 1024"),
    "rule_pairs_from_the_middle_of_a_step_inclusive": ("total % (step * groups) > TILE_M * groups",
                                                       "total % (step * groups) >= TILE_M * groups"),
    "rule_pairs_below_512_rows_at_a_narrow_n": ('return problem.ragged == "m" and problem.n > pingpong_max_n(problem.k)',
                                                'return problem.ragged == "m"'),
    "rule_swiglu_pairs_in_pingpong": ('    if problem.ragged == "m" and problem.activation == "none":\n'
                                      '        return pick_cluster_m(',
                                      '    if problem.ragged == "m":\n        return pick_cluster_m('),
}
RULE_TESTS = ["tests/test_grouped_mm_host.py", "-x", "-q", "-p", "no:cacheprovider", "-k",
              "pick_schedule or default_cluster or pairs_only or configuration"]
# Seeded races that a test without a GPU also sees: name: pytest's arguments
SANITIZER_FOCUS: Dict[str, List[str]] = {
    "pingpong_warpgroups_share_sub_tile_buffers": [*CASES_TESTS, "own_buffers"],
    # (on the GPU: the producer running more tiles ahead than the ring has slots)
    "claims_published_without_waiting_for_readers": CLAIMS_TESTS[:-1] + ["claimed and 384"],
    "schedule_unsynchronized": ["tests/test_grouped_mm_ptx.py", "-x", "-q", "-p", "no:cacheprovider", "-k",
                                "schedule_is_written"],
}


def run(name: str) -> bool:
    """True when the mutation is caught."""
    old, new = {**MUTATIONS, **SANITIZER_MUTATIONS, **RULE_MUTATIONS}[name]
    with tempfile.TemporaryDirectory(prefix=f"gcdsl-mutant-{name}-") as tmp:
        copy = os.path.join(tmp, "tree")
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".gpu", "__pycache__", "results"))
        found = occurrences(old, copy)
        if sum(found.values()) != 1:
            print(f"{name}: the text to mutate occurs {sum(found.values())} times; update the mutation")
            return False
        (path,) = found
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace(old, new))
        env = {**os.environ, "PYTHONPATH": copy + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "CUTE_DSL_NO_CACHE": "1"}
        for cmd in commands(name):
            if cmd is None:
                print(f"{name}: NOT RUN: compute-sanitizer is not on PATH (it comes with the CUDA toolkit)", flush=True)
                return False
            proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=900)
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
            if proc.returncode != 0:
                print(f"{name}: caught ({tail[0][:160]})", flush=True)
                return True
        # (pytest's summary line: some tests skipped, those that need the GPU this machine lacks)
        unrun = not has_hopper_gpu() and re.search(r"\d+ skipped", tail[0])
        verdict = "NOT RUN: the tests that ran passed, those that need a Hopper GPU skipped" if unrun else "NOT CAUGHT"
        print(f"{name}: {verdict} ({tail[0][:160]})", flush=True)
        return False


def commands(name: str) -> list:
    """The commands that must catch mutation `name`, in the order they run: its tests (on
    simulated threads first), or for a seeded race those that see it without a GPU, then
    racecheck (None where compute-sanitizer is missing); for a rule, the rules' host tests."""
    if name in RULE_MUTATIONS:
        return [[sys.executable, "-m", "pytest", *RULE_TESTS]]
    if name in SANITIZER_MUTATIONS:
        small = ["only", "claimed_tiles"] if name.startswith("claims_") else []  # (the claimed tiles alone)
        racecheck = None if shutil.which("compute-sanitizer") is None else [
            "compute-sanitizer", "--tool", "racecheck", "--report-api-errors", "no", "--error-exitcode", "1",
            sys.executable, "-m", "tests.kernels.grouped_mm_small", *small]
        seen_without_a_gpu = SANITIZER_FOCUS.get(name)
        return ([[sys.executable, "-m", "pytest", *seen_without_a_gpu]] if seen_without_a_gpu else []) + [racecheck]
    if name.startswith("claims_"):
        return [[sys.executable, "-m", "pytest", *CLAIMS_TESTS]]
    if name not in FOCUS:
        return [[sys.executable, "-m", "pytest", *TESTS]]
    if name.startswith(("experts_", "combine_", "route_", "decode_")):
        return [[sys.executable, "-m", "pytest", *FUSED_MOE_TESTS, FOCUS[name]]]
    return [[sys.executable, "-m", "pytest", *CASES_TESTS, f"{ON_A_SIMULATED_WARP} or ({FOCUS[name]})"]]


def main(argv=None) -> int:
    known = list(MUTATIONS) + list(SANITIZER_MUTATIONS) + list(RULE_MUTATIONS)
    parser = argparse.ArgumentParser(prog="python -m tests.grouped_mm_mutations",
                                     description="Seed each named bug into a copy of the tree and check that a test fails.")
    parser.add_argument("names", nargs="*", metavar="NAME", help="mutations to run (default: all; --list names them)")
    parser.add_argument("--jobs", type=int, default=1, help="mutations at once (compiles are CPU-bound, GPU runs short)")
    parser.add_argument("--list", action="store_true", help="print the mutations' names and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(known))
        return 0
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; --list names them")
    names = args.names or known
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        caught = dict(zip(names, pool.map(run, names)))
    missed = [name for name in names if not caught[name]]
    print(f"{len(names) - len(missed)} of {len(names)} mutations caught" + (f"; missed: {missed}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
