"""fa.ring: context parallelism -- causal ring attention over a torch.distributed process group.

The sequence is split over the W ranks of a group in zigzag order: cut into 2W chunks, rank r holds chunks r and
2W-1-r (zigzag_shard / zigzag_unshard), so that under a causal mask every rank does the same work. Each rank keeps
its queries and passes its keys and values around the ring (torch.distributed.batch_isend_irecv: NCCL on GPUs, gloo
on CPUs); at step s it holds the keys of rank src = (r - s) mod W and computes one block with fa's forward (with LSE):
  step 0        its own chunks, causal (the two chunks in sequence order make one causal block)
  src < r       all its queries against the first chunk of src (earlier in the sequence; the second is later)
  src > r       its second chunk of queries against both chunks of src (its first chunk comes before both)
Every block is 2c x c or c x 2c key pairs (c = chunk length): balanced. The partial results are merged with
fa.merge_attention's merge (fa_merge_partials: a running merge in float32, the last one into the output). The
backward runs fa's backward per block with the final output and LSE (so the blocks' gradients add up exactly), dq
accumulating locally and dk / dv accumulators (float32) travelling around the ring with their keys, arriving home
after the last step. causal=False runs every step as a full block (any layout of the sequence works then).

CUDA tensors run fa's kernels; CPU tensors (or reference=True) run the same orchestration with plain torch math per
block (ref_block_forward / ref_block_backward), so a gloo group of CPU processes tests it. On a gloo group, CUDA
tensors are staged through host memory for the send / recv (gloo moves host buffers): a way to run several ranks
on one GPU in tests; use NCCL for real runs.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor

from . import _structs as S
from . import shape_rules as rules
from ._merge import merge_parts
from ._torch_ops import bwd_impl, fwd_impl

__all__ = ["ring_attention", "zigzag_shard", "zigzag_unshard", "ref_block_forward", "ref_block_backward"]


# ---- zigzag layout ---------------------------------------------------------------------------------------------------
def zigzag_shard(x: Tensor, rank: int, world: int, dim: int = 1) -> Tensor:
    """Rank `rank`'s part of the full sequence x (along `dim`): chunks rank and 2*world-1-rank of 2*world."""
    if x.shape[dim] % (2 * world) != 0:
        raise ValueError(f"fa.ring: the sequence length {x.shape[dim]} must be a multiple of 2 * world = {2 * world}")
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


def zigzag_unshard(shards, dim: int = 1) -> Tensor:
    """The full sequence from every rank's zigzag shard (in rank order)."""
    world = len(shards)
    halves = [s.chunk(2, dim=dim) for s in shards]
    return torch.cat([halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))], dim=dim)


# ---- per-block kernels -----------------------------------------------------------------------------------------------
def _expand_kv(t: Tensor, heads: int) -> Tensor:
    return t if t.shape[2] == heads else t.repeat_interleave(heads // t.shape[2], dim=2)


def _ref_probs(q: Tensor, k: Tensor, causal: bool, scale: float, lse: Optional[Tensor]):
    """Scores [B, H, Sq, Sk] (masked: -inf), and the probabilities exp(s - lse) (lse given) or the block's LSE."""
    s = torch.einsum("bqhd,bkhd->bhqk", q, _expand_kv(k, q.shape[2])) * scale
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        i = torch.arange(sq, device=q.device).unsqueeze(1)
        j = torch.arange(sk, device=q.device).unsqueeze(0)
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    if lse is None:
        lse = torch.logsumexp(s, dim=-1)
    finite = torch.isfinite(lse).unsqueeze(-1)
    p = torch.where(
        finite, torch.exp(s - torch.where(finite, lse.unsqueeze(-1), torch.zeros_like(s))), torch.zeros_like(s)
    )
    return p, lse


def _lse_dtype(q: Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def ref_block_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """(o [B, Sq, H, Dv] in q's dtype, lse [B, H, Sq]) of one block by plain torch math (fa.h's semantics: masks
    aligned bottom-right, fully masked rows 0 / -inf)."""
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    p, lse = _ref_probs(q.to(work), k.to(work), causal, scale, None)
    o = torch.einsum("bhqk,bkhd->bqhd", p, _expand_kv(v.to(work), q.shape[2]))
    return o.to(q.dtype), lse.to(_lse_dtype(q))


def ref_block_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, causal: bool, scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of one block given the FINAL o and lse of the rows (as fa's backward takes them)."""
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qw, kw, vw, dw, ow = (t.to(work) for t in (q, k, v, dout, o))
    heads, hk = q.shape[2], k.shape[2]
    p, _ = _ref_probs(qw, kw, causal, scale, lse.to(work))
    dp = torch.einsum("bqhd,bkhd->bhqk", dw, _expand_kv(vw, heads))
    delta = (dw * ow).sum(-1).permute(0, 2, 1).unsqueeze(-1)  # [B, H, Sq, 1]
    ds = p * (dp - delta)
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, _expand_kv(kw, heads)) * scale
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, qw) * scale
    dv = torch.einsum("bhqk,bqhd->bkhd", p, dw)
    if hk != heads:  # GQA: sum over the query heads of each group
        g = heads // hk
        dk = dk.reshape(dk.shape[0], dk.shape[1], hk, g, dk.shape[-1]).sum(3)
        dv = dv.reshape(dv.shape[0], dv.shape[1], hk, g, dv.shape[-1]).sum(3)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _FaBlocks:
    """fa's forward (with LSE) and backward per block."""

    @staticmethod
    def forward(q, k, v, causal, scale):
        mask = S.FA_MASK_CAUSAL if causal else S.FA_MASK_NONE
        return fwd_impl(q, k, v, None, None, None, None, 0, 0, mask, -1, -1, 0.0, scale)

    @staticmethod
    def backward(dout, q, k, v, o, lse, causal, scale):
        mask = S.FA_MASK_CAUSAL if causal else S.FA_MASK_NONE
        return bwd_impl(
            dout,
            q,
            k,
            v,
            o,
            lse,
            None,
            None,
            None,
            None,
            0,
            0,
            mask,
            -1,
            -1,
            0.0,
            scale,
            torch.are_deterministic_algorithms_enabled(),
        )


class _RefBlocks:
    forward = staticmethod(ref_block_forward)
    backward = staticmethod(ref_block_backward)


# ---- the ring --------------------------------------------------------------------------------------------------------
class _Ring:
    """Send to the next rank, receive from the previous one, over torch.distributed point-to-point operations."""

    def __init__(self, group):
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self.next = dist.get_global_rank(self.group, (self.rank + 1) % self.world)
        self.prev = dist.get_global_rank(self.group, (self.rank - 1) % self.world)
        self.host_staged = dist.get_backend(self.group) == "gloo"  # gloo moves host buffers only

    def exchange(self, tensors, tag: int):
        """Posts the sends of `tensors` to the next rank and the receives of as many like-shaped ones from the
        previous rank; returns a function that waits and gives the received tensors."""
        stage = self.host_staged and tensors[0].is_cuda
        send = [t.contiguous().cpu() if stage else t.contiguous() for t in tensors]
        recv = [torch.empty_like(t) for t in send]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group, tag + i) for i, t in enumerate(send)]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group, tag + i) for i, t in enumerate(recv)]
        reqs = dist.batch_isend_irecv(ops)

        def wait():
            for r in reqs:
                r.wait()
            return [t.to(tensors[0].device) for t in recv] if stage else recv

        return wait


class _RunningMerge:
    """The merge of one rank's partial results, step by step: slot 0 of a [2, B, H, S, D] part buffer holds the
    merge so far, slot 1 the new block; each merge writes slot 0 of the other buffer, the last one the output."""

    def __init__(self, o0: Tensor, lse0: Tensor, part_dtype: torch.dtype):
        B, Sq, H, D = o0.shape
        self.shape, self.dtype, self.device = (B, Sq, H, D), o0.dtype, o0.device
        self.o = [torch.empty((2, B, H, Sq, D), dtype=part_dtype, device=o0.device) for _ in range(2)]
        self.lse = [torch.empty((2, B, H, Sq), dtype=part_dtype, device=o0.device) for _ in range(2)]
        self.cur = 0
        self.o[0][0].copy_(o0.permute(0, 2, 1, 3))
        self.lse[0][0].copy_(lse0)

    def add(self, o: Tensor, lse: Tensor, first_row: int, last: bool):
        """Merges a block's (o, lse) for rows first_row.. (the rows before it saw no key of the block)."""
        po, pl = self.o[self.cur], self.lse[self.cur]
        if first_row > 0:
            pl[1, :, :, :first_row].fill_(float("-inf"))
        pl[1, :, :, first_row:].copy_(lse)
        po[1, :, :, first_row:].copy_(o.permute(0, 2, 1, 3))
        if last:
            out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
            lse_out = torch.empty(self.shape[:1] + (self.shape[2], self.shape[1]), dtype=pl.dtype, device=self.device)
            merge_parts(po, pl, out, lse_out)
            return out, lse_out
        nxt = 1 - self.cur
        merge_parts(po, pl, self.o[nxt][0].permute(0, 2, 1, 3), self.lse[nxt][0])
        self.cur = nxt
        return None


def _ring_forward(ring: _Ring, blocks, q, k, v, causal: bool, scale: float):
    world, rank = ring.world, ring.rank
    half = q.shape[1] // 2
    merge = None
    kv = (k, v)
    for step in range(world):
        pending = ring.exchange(kv, tag=0) if step + 1 < world else None
        src = (rank - step) % world
        kk, vv = kv
        first_row = 0
        if step == 0:
            o, lse = blocks.forward(q, kk, vv, causal, scale)
        elif not causal:
            o, lse = blocks.forward(q, kk, vv, False, scale)
        elif src < rank:
            o, lse = blocks.forward(q, kk[:, :half], vv[:, :half], False, scale)
        else:
            o, lse = blocks.forward(q[:, half:], kk, vv, False, scale)
            first_row = half
        if world == 1:
            return o, lse
        if step == 0:
            merge = _RunningMerge(o, lse, torch.float64 if lse.dtype == torch.float64 else torch.float32)
        else:
            result = merge.add(o, lse, first_row, step == world - 1)
            if result is not None:
                return result
        if pending is not None:
            kv = tuple(pending())
    raise AssertionError("unreachable")


def _ring_backward(ring: _Ring, blocks, dout, q, k, v, out, lse, causal: bool, scale: float):
    world, rank = ring.world, ring.rank
    half = q.shape[1] // 2
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    lse_second = lse[:, :, half:].contiguous() if causal and world > 1 else None
    kv = (k, v)
    dkv_pending = None
    dk = dv = None
    for step in range(world):
        kv_pending = ring.exchange(kv, tag=0) if step + 1 < world else None
        src = (rank - step) % world
        kk, vv = kv
        if step == 0 or not causal:
            dq_s, dk_s, dv_s = blocks.backward(dout, q, kk, vv, out, lse, causal and step == 0, scale)
            dq += dq_s
            kv_rows = None
        elif src < rank:
            dq_s, dk_s, dv_s = blocks.backward(dout, q, kk[:, :half], vv[:, :half], out, lse, False, scale)
            dq += dq_s
            kv_rows = slice(0, half)
        else:
            dq_s, dk_s, dv_s = blocks.backward(
                dout[:, half:], q[:, half:], kk, vv, out[:, half:], lse_second, False, scale
            )
            dq[:, half:] += dq_s
            kv_rows = None
        if step == 0:
            dk, dv = dk_s.to(acc), dv_s.to(acc)
        else:
            dk, dv = dkv_pending()  # the accumulators of src's keys, from the previous rank
            if kv_rows is None:
                dk += dk_s
                dv += dv_s
            else:
                dk[:, kv_rows] += dk_s
                dv[:, kv_rows] += dv_s
        if world > 1:
            dkv_pending = ring.exchange((dk, dv), tag=2)
        if kv_pending is not None:
            kv = tuple(kv_pending())
    if world > 1:
        dk, dv = dkv_pending()  # this rank's own keys, home after the last step
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, causal, scale, reference):
        ring = _Ring(group)
        blocks = _RefBlocks if reference else _FaBlocks
        out, lse = _ring_forward(ring, blocks, q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.blocks, ctx.causal, ctx.scale = ring, blocks, causal, scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(ctx.ring, ctx.blocks, dout.contiguous(), q, k, v, out, lse, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None, None


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    group=None,
    *,
    causal: bool = True,
    scale: Optional[float] = None,
    return_lse: bool = False,
    reference: Optional[bool] = None,
):
    """Attention over a sequence split across the ranks of `group` (default: the world), differentiable.

    q [B, S, Hq, D], k [B, S, Hkv, D], v [B, S, Hkv, Dv]: this rank's shard of the sequence -- with causal=True, the
    zigzag shard (zigzag_shard(x, rank, world)); S even. Returns this rank's shard of the output [B, S, Hq, Dv] (and
    its LSE, float32 [B, Hq, S], when return_lse), equal up to rounding to fa.attention on the full sequence.
    reference: None runs fa's kernels for CUDA tensors and plain torch math for CPU tensors; True / False forces.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("fa.ring_attention needs an initialized torch.distributed process group")
    rules.ring(q.shape, k.shape, v.shape, bool(causal))
    if reference is None:
        reference = not q.is_cuda
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    out, lse = _RingAttention.apply(q, k, v, group, bool(causal), scale, bool(reference))
    return (out, lse) if return_lse else out
