"""train_cells.py -- the cells of bench_train.py (issue 45's training cells beyond bench_peers' standard sweep), the
contenders each one takes and their FLOP counts, in plain Python: no torch, so the CPU test
tests/bench/check_train_cells.py reads them on a machine without a GPU.

Every fixed-length cell holds 16k tokens a batch (bench_peers' TOKENS), bf16, q / k / v of one length (sq = sk):

  d192_128_8k         DeepSeek's 192 / 128 (head dim 192, value dim 128), causal, 8k a sequence, 16 heads (hidden
                      2048 over the value dim: 16 x 128); plain: plain_d128_8k (16 heads of 128, causal, 8k)
  gqa_4k, gqa_16k     GQA 32 / 8 at d 128, causal (hidden 4096 of queries); plain: the same shape with 32 KV heads
  softcap_4k, _8k     Gemma 2's d 256 with softcap 50, causal, 8 heads (hidden 2048; MHA); plain: d 256 causal
  softcap_window_8k   the same with Gemma 2's sliding window (keys j >= i - 4096) at 8k; plain: d 256 causal at 8k
  varlen              VARLEN_SEED's random lengths (256..8k each, summing to 16k), 16 heads of 128, causal; plain:
                      a fixed-length batch at the flop-weighted mean length (sum L^2 / sum L, to 256), ~16k tokens
  det_full_16k,       the deterministic backward (torch.use_deterministic_algorithms(True)) at d 128, 16 heads, one
  det_causal_16k      sequence of 16k, full and causal: fa deterministic against fa default (the plain cell is the
                      default mode in the same cell) and against FA2 / cuDNN in both modes

FLOPs follow bench_peers.flops(): 4 * b * h * sq * sk * d forward (here 2 * b * h * sq * sk * (d + dv), the two
GEMMs at their own widths), halved for causal, x2.5 for the backward; a sliding window scales the causal count by
its share of the causal triangle's (query, key) pairs (at 4k a window of 4096 hides nothing); varlen sums the
sequences (TFLOP/s over the real tokens, whatever a contender pads).
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Optional

TOKENS = 16384  # tokens a batch, as bench_peers' standard sweep
HIDDEN = 2048
SOFTCAP = 50.0  # Gemma 2's attention logit softcap
WINDOW = 4096  # Gemma 2's sliding window: keys j with i - WINDOW <= j <= i
VARLEN_SEED = 4  # its batch: 8 sequences, 322..6475 tokens (short ones beside two long ones)
VARLEN_MIN, VARLEN_MAX = 256, 8192

# contenders: "-det" runs its forward and backward under torch.use_deterministic_algorithms(True)
SDPA_PEERS = ("FA2", "cuDNN")
CONTENDERS = ("fa", "fa-det", "FA2", "FA2-det", "cuDNN", "cuDNN-det", "flex")


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    kind: str  # plain, mla (d != dv), gqa, softcap, varlen, deterministic
    what: str  # one line for the report
    b: int  # sequences a batch
    hq: int
    hkv: int
    s: int  # tokens a sequence (sq = sk); varlen: the longest
    d: int
    dv: int
    causal: bool
    window: int = -1  # left window of a causal cell (keys j >= i - window); -1: none
    softcap: float = 0.0
    lengths: tuple = ()  # varlen: each sequence's length
    plain: Optional[str] = None  # the plain cell this one's TFLOP/s is compared to
    quick: bool = False  # one of --quick's cells

    @property
    def seq_lengths(self) -> tuple:
        return self.lengths if self.lengths else (self.s,) * self.b

    @property
    def tokens(self) -> int:
        return sum(self.seq_lengths)


def varlen_lengths(seed=VARLEN_SEED, total=TOKENS, lo=VARLEN_MIN, hi=VARLEN_MAX) -> tuple:
    """Random lengths in [lo, hi] summing to total, drawn from random.Random(seed) (the same on every machine):
    log-uniform, so short sequences come as often as a packed batch of documents brings them, the last one the
    remainder."""
    if not (0 < lo and 2 * lo <= hi and total >= lo):
        raise ValueError(f"varlen_lengths: lo {lo}, hi {hi}, total {total}; expected 0 < 2 lo <= hi, total >= lo")
    rng = random.Random(seed)
    out, left = [], total
    while left > hi:
        top = min(hi, left - lo)  # leaves at least lo for the sequences after it
        n = int(math.exp(rng.uniform(math.log(lo), math.log(top))))
        out.append(min(max(n, lo), top))
        left -= out[-1]
    out.append(left)
    return tuple(out)


def visible_pairs(s: int, causal: bool, window: int = -1) -> int:
    """(query, key) pairs a sequence of s tokens computes: s^2, causal s (s + 1) / 2, a causal window of w keys
    back sum_i min(i, w) + 1."""
    if not causal:
        return s * s
    if window < 0 or window >= s - 1:
        return s * (s + 1) // 2
    w = window
    return (w + 1) * (w + 2) // 2 + (s - w - 1) * (w + 1)


def mask_share(s: int, causal: bool, window: int = -1) -> float:
    """The share of s^2 the FLOP count charges: 1 full, 0.5 causal (bench_peers.flops' halving), a causal window
    0.5 x its share of the causal triangle's pairs."""
    if not causal:
        return 1.0
    return 0.5 * visible_pairs(s, True, window) / visible_pairs(s, True)


def cell_flops(cell: Cell, backward: bool) -> float:
    """FLOPs of one call of the cell (forward, or backward at 2.5x), over its real tokens."""
    f = sum(
        2.0 * cell.hq * n * n * (cell.d + cell.dv) * mask_share(n, cell.causal, cell.window) for n in cell.seq_lengths
    )
    return f * 2.5 if backward else f


def contenders(cell: Cell) -> tuple:
    """Who runs a cell: fa and the SDPA peers everywhere; FlexAttention only where no SDPA backend can state the
    cell (softcap, window: FA2 there only through the flash_attn package); both modes in the deterministic cells."""
    if cell.kind == "deterministic":
        return ("fa", "fa-det", "FA2", "FA2-det", "cuDNN", "cuDNN-det")
    if cell.kind == "softcap":
        return ("fa", "FA2", "flex")
    return ("fa",) + SDPA_PEERS


def _fixed(name, kind, what, s, h, d, causal=True, dv=None, hkv=None, **kw) -> Cell:
    return Cell(name, kind, what, TOKENS // s, h, hkv or h, s, d, dv or d, causal, **kw)


def _varlen_cells() -> list:
    lengths = varlen_lengths()
    mean = sum(n * n for n in lengths) / sum(lengths)  # the fixed length of the same causal FLOPs per token
    s = max(256, int(round(mean / 256)) * 256)
    plain = Cell(
        "plain_varlen",
        "plain",
        f"plain for varlen: d 128 causal, 16 heads, {s} a sequence (sum L^2 / sum L of the varlen batch)",
        max(1, round(TOKENS / s)),
        16,
        16,
        s,
        128,
        128,
        True,
        quick=True,
    )
    var = Cell(
        "varlen",
        "varlen",
        f"varlen: {len(lengths)} sequences of {VARLEN_MIN}..{VARLEN_MAX} (seed {VARLEN_SEED}), d 128 causal, 16 heads",
        len(lengths),
        16,
        16,
        max(lengths),
        128,
        128,
        True,
        lengths=lengths,
        plain="plain_varlen",
        quick=True,
    )
    return [plain, var]


def all_cells() -> list:
    """Every cell in run order: each plain cell just before the cells compared to it (the same clocks)."""
    sc = SOFTCAP
    cells = [
        _fixed("plain_d128_8k", "plain", "plain: d 128 causal, 16 heads, 8k", 8192, 16, 128, quick=True),
        _fixed(
            "d192_128_8k",
            "mla",
            "DeepSeek 192 / 128 causal, 16 heads (hidden 2048 / value dim 128), 8k",
            8192,
            16,
            192,
            dv=128,
            plain="plain_d128_8k",
            quick=True,
        ),
        _fixed("plain_mha32_4k", "plain", "plain: d 128 causal, 32 / 32 heads, 4k", 4096, 32, 128, quick=True),
        _fixed(
            "gqa_4k", "gqa", "GQA 32 / 8, d 128 causal, 4k", 4096, 32, 128, hkv=8, plain="plain_mha32_4k", quick=True
        ),
        _fixed("plain_mha32_16k", "plain", "plain: d 128 causal, 32 / 32 heads, 16k", 16384, 32, 128),
        _fixed("gqa_16k", "gqa", "GQA 32 / 8, d 128 causal, 16k", 16384, 32, 128, hkv=8, plain="plain_mha32_16k"),
        _fixed("plain_d256_4k", "plain", "plain: d 256 causal, 8 heads, 4k", 4096, 8, 256, quick=True),
        _fixed(
            "softcap_4k",
            "softcap",
            f"Gemma 2: d 256 causal, softcap {sc:g}, 8 heads, 4k",
            4096,
            8,
            256,
            softcap=sc,
            plain="plain_d256_4k",
            quick=True,
        ),
        _fixed("plain_d256_8k", "plain", "plain: d 256 causal, 8 heads, 8k", 8192, 8, 256),
        _fixed(
            "softcap_8k",
            "softcap",
            f"Gemma 2: d 256 causal, softcap {sc:g}, 8 heads, 8k",
            8192,
            8,
            256,
            softcap=sc,
            plain="plain_d256_8k",
        ),
        _fixed(
            "softcap_window_8k",
            "softcap",
            f"Gemma 2: d 256 causal, window {WINDOW}, softcap {sc:g}, 8 heads, 8k",
            8192,
            8,
            256,
            window=WINDOW,
            softcap=sc,
            plain="plain_d256_8k",
        ),
    ]
    cells += _varlen_cells()
    cells += [
        _fixed("det_full_16k", "deterministic", "deterministic: d 128 full, 16 heads, 16k", 16384, 16, 128, False),
        _fixed(
            "det_causal_16k",
            "deterministic",
            "deterministic: d 128 causal, 16 heads, 16k",
            16384,
            16,
            128,
            quick=True,
        ),
    ]
    return cells


def select(names=None, quick=False) -> list:
    """The cells to run, in all_cells' order: `names` (a list; each feature cell brings its plain cell along), else
    --quick's cells, else all. An unknown name raises ValueError naming the known ones."""
    cells = all_cells()
    by_name = {c.name: c for c in cells}
    if names:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"--cells: unknown cell(s) {', '.join(unknown)}; expected some of {', '.join(by_name)}")
        wanted = set(names) | {by_name[n].plain for n in names if by_name[n].plain}
        return [c for c in cells if c.name in wanted]
    return [c for c in cells if c.quick] if quick else cells
