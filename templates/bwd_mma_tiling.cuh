// bwd_mma_tiling.cuh -- the warp layouts of the tensor-core backward (bwd_mma.cuh), one rule compiled twice: by
// NVRTC inside the kernel and by the host in generator/families/bwd_mma.cpp (validity, register estimate), so the
// predicate and the kernel can never disagree.
//
// Each GEMM of one backward tile splits the CTA's W warps into a grid wa x wb over an output of a16 x b16 blocks
// of 16 x 16: wa must divide a16 (a warp owns whole m16 rows), wb <= b16 (column blocks are dealt out by ceiling;
// the last warps may own fewer, `exact_b` demands an even split). Fragment bytes per MMA go as 1/rows + 1/cols of
// the warp tile, so the split minimising wa/a16 + wb/b16 wins (ties: the larger wa).
//   GEMM 1  S^T, dP^T  [keys x queries]:  a = block_n / 16, b = block_m / 16 (exact)
//   GEMM 2  dK, dV     [keys x head cols]: a = block_n / 16, b = max(DP, DVP) / 16
//   GEMM 3  dQ'        [queries x cols]:   a = block_m / 16, b = DP / 16
// DP, DVP: the head dims rounded up to 16. Plain C++17 (no CUDA), constexpr only.
#ifndef FA_BWD_MMA_TILING_CUH
#define FA_BWD_MMA_TILING_CUH

struct FaWarpSplit {
  int wa, wb;  // 0, 0: no split fits
};

constexpr FaWarpSplit fa_warp_split(int w, int a16, int b16, bool exact_b) {
  FaWarpSplit best{0, 0};
  for (int wa = 1; wa <= w; wa *= 2) {
    const int wb = w / wa;
    if (wa * wb != w || a16 % wa != 0 || wb > b16) continue;
    if (exact_b && b16 % wb != 0) continue;
    // cost wa/a16 + wb/b16, compared exactly as wa*b16 + wb*a16 (common denominator a16*b16)
    if (best.wa == 0 || wa * b16 + wb * a16 <= best.wa * b16 + best.wb * a16) best = FaWarpSplit{wa, wb};
  }
  return best;
}

struct FaBwdLayout {
  bool ok;
  int dp, dvp;                  // head dims padded to 16
  int wk1, wq1, mt1, nt1;       // GEMM 1: warps along keys / queries; m16 tiles, n8 tiles per warp
  int wk2, wd2, mt2, npk, npv;  // GEMM 2: warps along keys / columns; m16 tiles; n16 column pairs of dK, dV
  int wq3, wd3, mt3, np3;       // GEMM 3: warps along queries / columns; m16 tiles; n16 column pairs of dQ'
};

constexpr int fa_ceil_div(int x, int y) { return (x + y - 1) / y; }

constexpr FaBwdLayout fa_bwd_layout(int bm, int bn, int w, int d, int dv) {
  FaBwdLayout L{};
  L.ok = false;
  L.dp = fa_ceil_div(d, 16) * 16;
  L.dvp = fa_ceil_div(dv, 16) * 16;
  if (bm < 16 || bn < 16 || bm % 16 != 0 || bn % 16 != 0 || w < 1) return L;
  const FaWarpSplit s1 = fa_warp_split(w, bn / 16, bm / 16, true);
  const int dmax = L.dp > L.dvp ? L.dp : L.dvp;
  const FaWarpSplit s2 = fa_warp_split(w, bn / 16, dmax / 16, false);
  const FaWarpSplit s3 = fa_warp_split(w, bm / 16, L.dp / 16, false);
  if (s1.wa == 0 || s2.wa == 0 || s3.wa == 0) return L;
  L.wk1 = s1.wa;
  L.wq1 = s1.wb;
  L.mt1 = bn / 16 / s1.wa;
  L.nt1 = bm / 8 / s1.wb;
  L.wk2 = s2.wa;
  L.wd2 = s2.wb;
  L.mt2 = bn / 16 / s2.wa;
  L.npk = fa_ceil_div(L.dp / 16, s2.wb);
  L.npv = fa_ceil_div(L.dvp / 16, s2.wb);
  L.wq3 = s3.wa;
  L.wd3 = s3.wb;
  L.mt3 = bm / 16 / s3.wa;
  L.np3 = fa_ceil_div(L.dp / 16, s3.wb);
  L.ok = true;
  return L;
}

// float32 registers per thread of the dK and dV accumulators (live for the CTA's whole life).
constexpr int fa_bwd_persistent_regs(const FaBwdLayout& L) { return L.mt2 * (L.npk + L.npv) * 8; }

// float32 registers per thread the accumulators need: dK and dV for the CTA's life, plus the larger of the GEMM 1
// tile (S^T and dP^T together) and the GEMM 3 tile (dQ'). The host's register rule bounds this.
constexpr int fa_bwd_acc_regs(const FaBwdLayout& L) {
  const int persistent = fa_bwd_persistent_regs(L);
  const int g1 = 2 * L.mt1 * L.nt1 * 4;
  const int g3 = L.mt3 * L.np3 * 8;
  return persistent + (g1 > g3 ? g1 : g3);
}

// Whether every warp owns the same number of head-column blocks in GEMMs 2 and 3 (no guarded tail blocks).
constexpr bool fa_bwd_even_cols(const FaBwdLayout& L) {
  return L.npk * L.wd2 == L.dp / 16 && L.npv * L.wd2 == L.dvp / 16 && L.np3 * L.wd3 == L.dp / 16;
}

// Registers of each GEMM phase when its k loop is software-pipelined (accumulators of the phase plus two ldmatrix
// fragment buffers). The kernel pipelines a phase only without bias/ALiBi/softcap, with evenly split columns and
// while persistent + phase <= fa_bwd_pipe_budget; else it loads one k step at a time (fewer registers). Calibrated
// with ptxas -v like the host's register rule (bwd_mma.cpp).
constexpr int fa_bwd_pipe_g1(const FaBwdLayout& L) { return 2 * L.mt1 * L.nt1 * 4 + 2 * (L.mt1 * 4 + L.nt1 * 2); }
constexpr int fa_bwd_pipe_g3(const FaBwdLayout& L) { return L.mt3 * L.np3 * 8 + 2 * (L.mt3 * 4 + L.np3 * 4); }
constexpr int fa_bwd_pipe_g2(const FaBwdLayout& L) { return 2 * (L.mt2 * 4 + (L.npk > L.npv ? L.npk : L.npv) * 4); }
constexpr int fa_bwd_pipe_budget() { return 224; }

// Whether the dQ' red.adds of a tile are spread over GEMM 2's k steps (the kernel does so only where GEMM 2 is
// pipelined): the dQ' accumulators then stay live through GEMM 2. Calibrated with ptxas -v (sm_80, sm_90a, every
// valid plain and masked/varlen point, head dims 32-256, 2026-11-22): spill-free while the dQ' tile is at most 32
// registers and persistent + GEMM 2 + dQ' registers stay within 208 with two stages and two m16 rows of dQ' per
// warp, 184 otherwise.
constexpr bool fa_bwd_interleave(const FaBwdLayout& L, int stages) {
  const int dq = L.mt3 * L.np3 * 8;
  const int total = fa_bwd_persistent_regs(L) + fa_bwd_pipe_g2(L) + dq;
  return dq <= 32 && total <= (stages >= 2 && L.mt3 >= 2 ? 208 : 184);
}

// Whether the kernel's per-tile Q/dO/LSE/Delta loads use incrementally advanced offsets and a predicate-free path
// for full query blocks (fewer instructions between the barrier and GEMM 1, a few more live registers).
// Calibrated with ptxas -v (sm_80 and sm_90a, every valid plain, masked/varlen and bias+ALiBi+softcap+window+varlen
// point, head dims 8-256, 2026-11-23: 1291 kernels, no spills): on where the dK/dV accumulators take at most 64
// registers; the sm_90a d128 default (128) spills 4 bytes with it.
constexpr bool fa_bwd_lean_issue(const FaBwdLayout& L) { return fa_bwd_persistent_regs(L) <= 64; }

// Which CTA takes which work. The grid is (key blocks nbk, kv heads, batch) and CTAs start roughly in linear order
// lin = x + nbk * (y + heads_kv * z). In the plain order CTA (x, y, z) takes key block x of kv head y, batch z: the
// key blocks of one (head, batch) pair run side by side and share its Q, dO and dQ' rows in L2. Under a causal
// mask key block n meets nbk - n query blocks, so in the plain order the last pairs start their heaviest blocks in
// the last wave and the grid ends on a tail. The last `tail` pairs therefore go key-block-major (all their block 0s,
// then all their block 1s, ...): heaviest first, the grid ends on light blocks. Every key block of a pair still
// starts after the pair's lower key blocks (the deterministic mode's dQ' order relies on it).
// The decode divides by multiplying (fa_div_magic), integer ops that the compiler keeps in uniform registers like
// blockIdx itself. A hardware-division decode costs vector registers even when it runs once, in the prologue, with
// the result kept in shared memory: the sm_90a d 128 causal default (64 x 128 x 8 warps) spilled 36 bytes with it.
// n / d for 1 <= d < 2^15 and n < 2^16: umulhi(2n, ceil(2^31 / d)) (n d < 2^31 keeps the error below 1/d).
constexpr unsigned fa_div_magic(unsigned d) { return static_cast<unsigned>(((1ull << 31) + d - 1) / d); }
constexpr unsigned fa_div_by_magic(unsigned n, unsigned magic) {
  return static_cast<unsigned>((static_cast<unsigned long long>(2u * n) * magic) >> 32);
}
struct FaBwdCta {
  int nb, g, b;  // key block, kv head, batch
};
// x, y, z: the CTA's block index; nbk, heads, batches: the grid; tail, magic_tail = fa_div_magic(tail), magic_heads
// = fa_div_magic(heads): from the host (fa_bwd_lpt_tail), tail 0 for the plain order.
constexpr FaBwdCta fa_bwd_cta(unsigned x, unsigned y, unsigned z, unsigned nbk, unsigned heads, unsigned batches,
                              unsigned tail, unsigned magic_tail, unsigned magic_heads) {
  FaBwdCta c{static_cast<int>(x), static_cast<int>(y), static_cast<int>(z)};
  if (tail > 0) {
    const unsigned lin = x + nbk * (y + heads * z), head = (heads * batches - tail) * nbk;
    if (lin >= head) {
      const unsigned r = lin - head, nb = fa_div_by_magic(r, magic_tail);
      const unsigned pair = heads * batches - tail + (r - nb * tail), b = fa_div_by_magic(pair, magic_heads);
      c = FaBwdCta{static_cast<int>(nb), static_cast<int>(pair - b * heads), static_cast<int>(b)};
    }
  }
  return c;
}
// Which kernels decode the order: causal ones and those with a mask_mod, except the 128 x 128 tile (FA2's d 64
// tile, no register to spare: ptxas spilled 24 bytes with the decode, and the plain order costs it less than a
// smaller tile would). A mask_mod's heavy key blocks are its low ones in every ready mod (sinks: block 0 holds every
// query block; prefix-LM: the prefix; a restated causal), so the host puts all its pairs key-block-major
// (fa_bwd_lpt_tail with all_pairs).
constexpr bool fa_bwd_cta_order(int mask, bool mask_mod, int block_m, int block_n) {
  return (mask == 1 || mask_mod) && !(block_m == 128 && block_n == 128);
}
// Host side: the pairs that go key-block-major, enough for `waves` waves of `slots` resident CTAs (<= pairs), or
// every pair with all_pairs; 0 where the grid fits in one wave, or where the decode's ranges (pairs and tail CTAs
// < 2^16, heads < 2^15) do not hold.
constexpr int fa_bwd_lpt_tail(int heads, int batches, int nbk, int slots, int waves, bool all_pairs = false) {
  const long long pairs = static_cast<long long>(heads) * batches;
  if (pairs <= 0 || nbk <= 1 || slots <= 0 || pairs * nbk <= slots) return 0;
  long long t = all_pairs ? pairs : fa_ceil_div(waves * slots, nbk);
  if (t > pairs) t = pairs;
  if (pairs >= (1 << 16) || t * nbk >= (1 << 16) || heads >= (1 << 15)) return 0;
  return static_cast<int>(t);
}

#endif  // FA_BWD_MMA_TILING_CUH
