// fwd_mla.cuh -- Hopper (sm_90a) MLA decode: split-KV attention of many query heads over a latent KV cache whose
// values are the first head_dim_v columns of its keys (DeepSeek's MLA: head_dim 576, head_dim_v 512, one latent KV
// head), contiguous or paged at any page size, with wgmma for both GEMMs (fp16 / bf16).
//
// Work: a CTA owns kFaMlaRows = 64 packed rows (packed row R = i * group + hq: query token i, query head g * group +
// hq) of one (batch b, KV head g) and one split of its key blocks (common/split.cuh: fa_split_work); grid x = row
// tile (the tiles reading the same keys launch side by side and share them through L2), y = split + num_splits * g,
// z = b. Two schedules (fa_cfg::kSched): 0, lockstep (below), and 1, seesaw (fwd_mla_seesaw.cuh: each consumer the
// scores of its own block of a pair, the softmax of one under the other's GEMMs). The lockstep schedule: three
// warpgroups, __launch_bounds__(384, 1):
//   producer (warpgroup 0, setmaxnreg.dec): half h (64 threads) owns stage h and copies blocks h, h + 2, .. (kBlockN
//     = 64 keys x head_dim each) by 16-byte cp.async into 128-byte-swizzled rows (thread: rows (t / 8) + 8 k, 16-byte
//     column t % 8 of every 64-column chunk; a row is one key, its page from the block table, so any page size
//     works: the 8 page indices are read first, then the 72 copies), zero-filling keys past the used length or on a
//     page outside [0, num_pages) (never read) and flagging them (a byte per key; a word per block, by bar.red.or over
//     the half). Per block it waits for the stage's empty
//     mbarrier, issues the copies, waits for them (cp.async.wait_group 0), fences the async proxy and arrives on the
//     stage's full mbarrier (64 arrivals): a block is published as soon as it lands, and the stage's next block is
//     issued as soon as the consumers release it (one block of compute ahead). kL2Ahead > 0: the rows of block
//     t + kL2Ahead are bulk-prefetched into L2 (cp.async.bulk.prefetch.L2) as block t is issued.
//   consumers (warpgroups 1 and 2, setmaxnreg.inc; c a template parameter, so the wgmma descriptors are uniform):
//     consumer c computes the scores of keys [32 c, 32 c + 32) of each block for all 64 rows and owns the output
//     columns [256 c, 256 c + 256):
//       S_c = Q K_c^T                 wgmma m64n32k16 x head_dim / 16, Q and K from shared memory (SS), over
//                                     kSets accumulator sets (interleaved chains, summed; 1: two measured no
//                                     faster on an H200); descriptors per 64-column chunk from the uniform base
//       m'  = max(m, rowmax S_0, rowmax S_1)    (row maxima meet in shared memory; both compute the same m')
//       P_c = exp2(S_c scale_log2 - m' scale_log2) -> shared memory (dtype, the swizzled A layout of the next GEMM)
//       l_c = l_c exp2((m - m') scale_log2) + rowsum P_c      (each consumer sums its own keys)
//       O_c = O_c exp2((m - m') scale_log2) + P V[:, 256 c .. 256 c + 255]   (a warp whose factors are all 1
//                                     skips the rescale)
//                                     wgmma m64n256k16 x 4, P (both halves) and V = the stage's first columns read
//                                     MN-major (transposed descriptor), both from shared memory
//     then arrive on the stage's empty mbarrier (one arrival per warp). Named barriers: 1 and 2 (the producer halves'
//     flag reductions), 3 (Q ready), 4 (row maxima / row sums exchanged), 5 (P written; each writer fences the async
//     proxy first).
//   The end: l = l_0 + l_1, O / l and lse = (m scale_log2 + log2 l) ln 2 written by each consumer for its columns:
//   num_splits == 1: o (dtype) and lse; num_splits > 1: the split's normalized O (float32) and natural-log LSE into
//   part_o / part_lse (layout in fa_args.cuh) for the fwd_combine step. A row or split that sees no key gives O = 0,
//   lse = -inf.
// Masks: bottom-right aligned to the used length (common/split.cuh); blocks crossing a band edge, the used length or
// holding a key on a page outside the pool mask per key (-inf), others not at all. Q rows past the packed rows are
// zero and never written. Attention sinks (kHasSinks): the row's sink column joins at the end (row_end). Shared
// memory: fwd_mla_layout.cuh. Reads fa_cfg: kDtype, kHeadDim (a multiple of 64, <= 576), kHeadDimV (512, <=
// kHeadDim), kMask, kHasLse, kHasSinks, kPaged, kBlockN (64), kStages (2), kL2Ahead, kSched. The host covers only
// problems whose v is k's first head_dim_v columns (same pointer and strides); no ALiBi, softcap, bias, varlen or
// user code (generator/families/fwd_mla).
#ifndef FA_FWD_MLA_CUH
#define FA_FWD_MLA_CUH

#include "common/pdl.cuh"
#include "common/sm80.cuh"
#include "common/sm90.cuh"
#include "common/split.cuh"
#include "fwd_mla_layout.cuh"

namespace fa_mla {
using namespace fa_sm80;

constexpr int kD = fa_cfg::kHeadDim;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kDc = fa_mla_chunks(kD);  // 64-column chunks of a q / k row
constexpr int kR = kFaMlaRows;          // 64 packed rows
constexpr int kBN = fa_cfg::kBlockN;    // keys per block (64)
constexpr int kSt = fa_cfg::kStages;    // K stages (2)
constexpr int kL2 = fa_cfg::kL2Ahead;   // L2 prefetch distance in blocks (0: off)
constexpr int kHalf = kBN / 2;          // keys of S per consumer
constexpr int kCols = kDV / 2;          // output columns per consumer (256)
constexpr int kChunk = kFaMlaChunk;     // 8 KB
constexpr int kStage = fa_mla_stage_bytes(kD, kBN);
constexpr int kOffK = fa_mla_off_k(kD);
constexpr int kOffP = fa_mla_off_p(kD, kBN, kSt);
constexpr int kOffMax = fa_mla_off_max(kD, kBN, kSt);
constexpr int kOffSum = fa_mla_off_sum(kD, kBN, kSt);
constexpr int kOffValid = fa_mla_off_valid(kD, kBN, kSt);
constexpr int kOffBad = fa_mla_off_bad(kD, kBN, kSt);
constexpr int kOffBar = fa_mla_off_bar(kD, kBN, kSt);
constexpr int kSmemBytes = fa_mla_smem_bytes(kD, kBN, kSt, fa_cfg::kSched);
constexpr int kSets = 1;   // independent accumulator sets of S (wgmma chains)
constexpr int kRegP = 40;  // producer / consumer registers (128 x 40 + 256 x 232 <= 64K)
constexpr int kRegC = 232;
#define FA_MLA_NEG_INF __int_as_float(0xff800000)

static_assert(fa_cfg::kDtype == 1 || fa_cfg::kDtype == 2, "fwd_mla: fp16 or bf16 only");
static_assert(kD % 64 == 0 && kD <= 576 && kDV == 512 && kDV <= kD, "fwd_mla: head_dim 64k <= 576, head_dim_v 512");
static_assert(kBN == 64 && kSt == 2, "fwd_mla: 64-key blocks, 2 stages");
static_assert(kSmemBytes <= 232448, "fwd_mla: shared memory above 227 KB");
static_assert(!fa_cfg::kHasAlibi && !fa_cfg::kHasSoftcap && !fa_cfg::kHasBias && !fa_cfg::kVarlen,
              "fwd_mla: no ALiBi, softcap, bias or varlen");

// Byte offset of 16-byte unit u (0..7) of row r inside a 128-byte-swizzled chunk.
FA_DEVICE unsigned swz(int r, int u) { return (unsigned)(r * 128 + ((u ^ (r & 7)) << 4)); }

// What both roles read: the CTA's work and its shared memory (base: the 1024-aligned shared-window address, gbase the
// same as a generic pointer).
struct Cta {
  FaSplitWork w;
  int b, g, r0, split;
  unsigned base;
  unsigned char* gbase;
  FA_DEVICE unsigned full(int s) const { return base + (unsigned)kOffBar + 8u * (unsigned)s; }
  FA_DEVICE unsigned empty(int s) const { return base + (unsigned)(kOffBar + 8 * kSt) + 8u * (unsigned)s; }
  FA_DEVICE float* smax() const { return (float*)(gbase + kOffMax); }    // [2][64] the consumers' row maxima
  FA_DEVICE float* ssum() const { return (float*)(gbase + kOffSum); }    // [2][64] the consumers' row sums
  FA_DEVICE unsigned char* svalid() const { return gbase + kOffValid; }  // [kSt][kBN] key read (1) or not
  FA_DEVICE int* sbad() const { return (int*)(gbase + kOffBad); }        // [kSt] a key of the block not read
};

// ---------------- producer warpgroup: cp.async of K blocks (any page size), zero fill and key flags ----------------
// Half PH (warps 2 PH, 2 PH + 1: 64 threads, pt = thread in the half) owns stage PH and copies blocks PH, PH + 2, ..:
// it waits for the stage to be empty, reads the page indices of its 8 rows, issues the copies, waits for them and
// marks the stage full, so a block is published as soon as it lands and the stage's next block is issued as soon as
// the consumers release it.
template <int PH>
FA_DEVICE void produce(const FaFwdArgs& a, const Cta& c, int pt) {
  typedef unsigned short T;
  const int c8 = pt & 7, rsub = pt >> 3;
  const T* kpool = (const T*)a.k;
  const int key_hi = c.w.key_hi, n_blocks = c.w.n_blocks;
  const int* bt = fa_cfg::kPaged ? a.block_table + (long long)c.b * a.bt_stride : nullptr;
  const long long head = (long long)c.g * a.k_sh;
  unsigned char* valid = c.svalid() + PH * kBN;
  for (int it = PH; it < n_blocks; it += kSt) {
    const int kn = (c.w.blk0 + it) * kBN;
    fa_mbar_wait(c.empty(PH), ((unsigned)(it / kSt) & 1u) ^ 1u);
    // the page of each row first (independent loads), then the copies; -1: past the used keys or outside the pool
    int pg[kBN / 8];
#pragma unroll
    for (int k = 0; k < kBN / 8; ++k) {
      const int j = kn + rsub + 8 * k;
      if constexpr (fa_cfg::kPaged) pg[k] = j < key_hi ? bt[j >> a.page_shift] : -1;
      else pg[k] = j < key_hi ? 0 : -1;
    }
    if constexpr (kL2 > 0) {  // one row of the block kL2 ahead per thread
      const int j = kn + kL2 * kBN + pt;
      if (it + kL2 < n_blocks && j < key_hi) {
        long long off = (long long)c.b * a.k_sb + (long long)j * a.k_ss + head;
        bool ok = true;
        if constexpr (fa_cfg::kPaged) {
          const int page = bt[j >> a.page_shift];
          ok = (unsigned)page < (unsigned)a.num_pages;
          off = (long long)page * a.k_sb + (long long)(j & (a.page_size - 1)) * a.k_ss + head;
        }
        if (ok) fa_prefetch_l2(kpool + off, (unsigned)(kD * 2));
      }
    }
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kBN / 8; ++k) {
      const int r = rsub + 8 * k, j = kn + r;
      const bool ok = pg[k] >= 0 && (!fa_cfg::kPaged || pg[k] < a.num_pages);
      bad = bad || !ok;
      if (c8 == 0) valid[r] = ok ? 1 : 0;
      long long off = 0;
      if (ok) {
        off = fa_cfg::kPaged ? (long long)pg[k] * a.k_sb + (long long)(j & (a.page_size - 1)) * a.k_ss + head
                             : (long long)c.b * a.k_sb + (long long)j * a.k_ss + head;
      }
      const T* src = kpool + off + c8 * 8;  // a row not read points into the pool's first row (0 bytes copied)
      const unsigned dst = c.base + (unsigned)(kOffK + PH * kStage) + swz(r, c8);
#pragma unroll
      for (int ch = 0; ch < kDc; ++ch) cp_async16(dst + (unsigned)(ch * kChunk), src + ch * 64, ok ? 16 : 0);
    }
    cp_commit();
    bad = fa_bar_or(1 + PH, 64, bad);
    if (pt == 0) c.sbad()[PH] = bad ? 1 : 0;
    cp_wait<0>();  // the block landed: publish it to the async proxy and mark the stage full
    fa_fence_proxy_async();
    fa_mbar_arrive(c.full(PH));
  }
}

// The visible keys [lo[hh], hi[hh]) of this thread's rows rw + 8 hh (common/split.cuh's band, bottom-right aligned).
FA_DEVICE void row_band(const FaFwdArgs& a, const Cta& c, int rw, int (&lo)[2], int (&hi)[2]) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = (c.r0 + rw + hh * 8) / a.group;
    lo[hh] = 0;
    hi[hh] = c.w.sk;
    if constexpr (fa_cfg::kMask != 0) {
      if (a.win_left >= 0) lo[hh] = i + c.w.sk - c.w.sq - a.win_left;
      if (a.win_right >= 0) hi[hh] = min(c.w.sk, i + c.w.sk - c.w.sq + a.win_right + 1);
    }
  }
}

// -inf into the scores (wgmma D layout, NT n8 tiles of keys j0 + 8 j + 2 tq + e of block kn) of keys not read (key
// flags `valid`, indexed from the block's first key) or outside the rows' bands.
template <int NT>
FA_DEVICE void mask_keys(float (&s)[NT * 4], const unsigned char* valid, int j0, int kn, int tq, const int (&lo)[2],
                         const int (&hi)[2]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int jl = j0 + j * 8 + tq * 2 + e;
      const int jg = kn + jl;
      const bool ok = valid[jl] != 0;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        if (!ok || jg < lo[hh] || jg >= hi[hh]) s[j * 4 + hh * 2 + e] = FA_MLA_NEG_INF;
    }
}

// Q: the tile's packed rows, zero past the last row, by the 256 consumer threads (ct: 0..255; cp.async, then
// published to the async proxy and barrier 3).
FA_DEVICE void load_q(const FaFwdArgs& a, const Cta& c, int ct) {
  typedef unsigned short T;
  const int group = a.group;
  for (int idx = ct; idx < kR * kDc * 8; idx += 256) {
    const int r = idx / (kDc * 8), u = idx - r * (kDc * 8);
    const int ch = u >> 3, cu = u & 7;
    const bool ok = r < c.w.rows;
    const T* src = (const T*)a.q;
    if (ok) {
      const int R = c.r0 + r, i = R / group, h = c.g * group + (R - (R / group) * group);
      src += (long long)c.b * a.q_sb + (long long)i * a.q_ss + (long long)h * a.q_sh + ch * 64 + cu * 8;
    }
    cp_async16(c.base + (unsigned)(ch * kChunk) + swz(r, cu), src, ok ? 16 : 0);
  }
  cp_commit();
  cp_wait<0>();
  fa_fence_proxy_async();
  fa_bar_sync(3, 256);
}

// Row r of the tile's end given its final max m (log2 units, -inf: no key) and sum l: O's factor *inv and the LSE
// *lse; with attention sinks (kHasSinks) and no splits, the row's sink column joins (common/sinks.cuh; split
// partials leave it to the combine step).
FA_DEVICE void row_end(const FaFwdArgs& a, const Cta& c, int r, float m, float l, float* inv, float* lse) {
  *inv = l > 0.f ? 1.f / l : 0.f;
  *lse = (l > 0.f && m != FA_MLA_NEG_INF) ? (m + __log2f(l)) * 0.6931471805599453f : FA_MLA_NEG_INF;
  if constexpr (fa_cfg::kHasSinks) {
    if (a.num_splits == 1 && r < c.w.rows) {
      const int group = a.group, R = c.r0 + r;
      const int i = R / group, h = c.g * group + (R - i * group);
      const FaRowEnd e = fa_sink_row_end(m, l, a.sinks[h]);
      *inv = e.o_mul;
      *lse = e.lse;
    }
  }
}

// Consumer CW's output columns [256 CW, 256 CW + 256) of its rows rw and rw + 8 (o in the wgmma D layout), scaled by
// inv, and the LSE: o and lse, or the split's partials (rows past the tile's packed rows are not written).
template <int CW>
FA_DEVICE void write_out(const FaFwdArgs& a, const Cta& c, const float (&o)[kCols / 2], int rw, int tq,
                         const float (&inv)[2], const float (&lse)[2]) {
  typedef unsigned short T;
  const int group = a.group;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = rw + hh * 8;
    if (r >= c.w.rows) continue;
    const int R = c.r0 + r;
    const int i = R / group, h = c.g * group + (R - i * group);
    const int col0 = CW * kCols + tq * 2;
    if (a.num_splits > 1) {
      const long long row = (((long long)c.split * a.batch + c.b) * a.heads_q + h) * a.seqlen_q + i;
      float* dst = a.part_o + row * kDV + col0;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
        *(float2*)(dst + j * 8) = make_float2(o[j * 4 + hh * 2] * inv[hh], o[j * 4 + hh * 2 + 1] * inv[hh]);
      if (CW == 0 && tq == 0) a.part_lse[row] = lse[hh];
    } else {
      T* op = (T*)a.o + (long long)c.b * a.o_sb + (long long)i * a.o_ss + (long long)h * a.o_sh + col0;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
        *(unsigned*)(op + j * 8) = pack2(o[j * 4 + hh * 2] * inv[hh], o[j * 4 + hh * 2 + 1] * inv[hh]);
      if constexpr (fa_cfg::kHasLse) {
        if (CW == 0 && tq == 0 && a.lse != nullptr)
          a.lse[(long long)c.b * a.lse_sb + (long long)h * a.lse_sh + i] = lse[hh];
      }
    }
  }
}

// What the consumers of both schedules hold: the arguments, the CTA, the thread's place in the wgmma D layout (warp
// of the warpgroup, lane, quad lane tq, first row rw; +8: the second), the scale (log2 units), its 256 output columns
// (zero at the start) and its rows' key bands (row_band).
struct ConsumerBase {
  typedef unsigned short T;
  const FaFwdArgs& a;
  const Cta& c;
  int warp, lane, tq, rw;
  float mul;
  float o[kCols / 2];
  int lo_r[2], hi_r[2];

  FA_DEVICE ConsumerBase(const FaFwdArgs& a_, const Cta& c_, int tid) : a(a_), c(c_) {
    warp = (tid >> 5) & 3;
    lane = tid & 31;
    tq = lane & 3;
    rw = warp * 16 + (lane >> 2);
    mul = a.scale_log2;
#pragma unroll
    for (int i = 0; i < kCols / 2; ++i) o[i] = 0.f;
  }
};

// ---------------- consumer warpgroup CW: keys [32 CW, 32 CW + 32) of S, output columns [256 CW, 256 CW + 256) -------
// CW is compile-time, so every wgmma descriptor is the uniform base plus the stage's offset plus a constant.
template <int CW>
struct Consumer : ConsumerBase {
  float row_m[2], row_l[2];
  unsigned long long dq0, dk0, dp0, dv0;

  FA_DEVICE Consumer(const FaFwdArgs& a_, const Cta& c_, int tid) : ConsumerBase(a_, c_, tid) {
    row_m[0] = row_m[1] = FA_MLA_NEG_INF;
    row_l[0] = row_l[1] = 0.f;
  }

  // Q (load_q), row facts and the descriptors.
  FA_DEVICE void start(int ct) {
    load_q(a, c, ct);
    row_band(a, c, rw, lo_r, hi_r);
    dq0 = fa_wg_desc_sw128(c.base, 16, 1024);
    dk0 = fa_wg_desc_sw128(c.base + (unsigned)(kOffK + CW * kHalf * 128), 16, 1024);
    dp0 = fa_wg_desc_sw128(c.base + (unsigned)kOffP, 16, 1024);
    dv0 = fa_wg_desc_sw128(c.base + (unsigned)(kOffK + CW * (kCols / 64) * kChunk), kChunk, 1024);
  }

  // One block: S, the shared row maxima, P, O; then its stage is released.
  FA_DEVICE void block(int it) {
    const FaSplitWork& w = c.w;
    const int ST = it % kSt;  // uniform (it is): descriptors stay uniform adds
    const int kn = (w.blk0 + it) * kBN;
    fa_mbar_wait(c.full(ST), (unsigned)(it / kSt) & 1u);
    // ---- S_c = Q K_c^T: kSets accumulator sets over interleaved k steps (independent wgmma chains: one m64n32k16
    // is short next to its latency), summed at the end ----
    // Descriptors per 64-column chunk plus k-step immediates (one running base per chunk keeps ptxas from hoisting
    // head_dim / 16 descriptor pairs out of the block loop).
    static_assert(4 % kSets == 0, "fwd_mla: kSets divides the 4 k steps of a chunk");
    float sx[kSets][kHalf / 2], s[kHalf / 2];
    fa_wg_fence();
#pragma unroll
    for (int ch = 0; ch < kDc; ++ch) {
      const unsigned long long dqc = dq0 + (unsigned)((ch * kChunk) >> 4);
      const unsigned long long dkc = dk0 + (unsigned)((ST * kStage + ch * kChunk) >> 4);
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4)
        FaWg<kHalf>::ss<fa_cfg::kDtype>(sx[k4 % kSets], dqc + (unsigned)(k4 * 2), dkc + (unsigned)(k4 * 2),
                                        ch > 0 || k4 >= kSets ? 1 : 0);
    }
    fa_wg_commit();
    fa_wg_wait<0>();
#pragma unroll
    for (int x = 0; x < kSets; ++x) fa_wg_fence_regs(sx[x]);
#pragma unroll
    for (int i = 0; i < kHalf / 2; ++i) {
      float t = sx[0][i];
#pragma unroll
      for (int x = 1; x < kSets; ++x) t += sx[x][i];
      s[i] = t;
    }
    // ---- masking: blocks crossing the band or the used length, keys on pages outside the pool ----
    if (c.sbad()[ST] != 0 || kn < w.full_lo || kn + kBN > w.full_hi)
      mask_keys<kHalf / 8>(s, c.svalid() + ST * kBN, CW * kHalf, kn, tq, lo_r, hi_r);
    // ---- row maxima of the two key halves meet in shared memory ----
    float* smax = c.smax();
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = FA_MLA_NEG_INF;
#pragma unroll
      for (int j = 0; j < kHalf / 8; ++j) mx = fmaxf(mx, fmaxf(s[j * 4 + hh * 2], s[j * 4 + hh * 2 + 1]));
      mx = fa_lanes_max<4>(mx);
      if (tq == 0) smax[CW * kR + rw + hh * 8] = mx;
    }
    fa_bar_sync(4, 256);
    // ---- P = exp2(S scale - m'), to shared memory; row sums and the rescale factors ----
    const unsigned sP = c.base + (unsigned)kOffP;
    float corr[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = rw + hh * 8;
      const float mx = fmaxf(row_m[hh], fmaxf(smax[r], smax[kR + r]));
      const float ms = mx == FA_MLA_NEG_INF ? 0.f : mx * mul;
      corr[hh] = fa_exp2(row_m[hh] * mul - ms);
      row_m[hh] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kHalf / 8; ++j) {
        const float p0 = fa_exp2(fmaf(s[j * 4 + hh * 2], mul, -ms));
        const float p1 = fa_exp2(fmaf(s[j * 4 + hh * 2 + 1], mul, -ms));
        sum += p0 + p1;
        fa_st_shared_b32(sP + swz(r, CW * kHalf / 8 + j) + (unsigned)(tq * 4), pack2(p0, p1));
      }
      row_l[hh] = row_l[hh] * corr[hh] + sum;
    }
    fa_fence_proxy_async();
    fa_bar_sync(5, 256);
    // ---- O_c = O_c corr + P V[:, columns of c] (the rescale skipped by warps whose row maxima all held) ----
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        o[j * 4 + 0] *= corr[0];
        o[j * 4 + 1] *= corr[0];
        o[j * 4 + 2] *= corr[1];
        o[j * 4 + 3] *= corr[1];
      }
    }
    fa_wg_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const unsigned vo = (unsigned)(ST * kStage + kk * 16 * 128);
      FaWg<kCols>::ss_t<fa_cfg::kDtype>(o, dp0 + (unsigned)(kk * 2), dv0 + (vo >> 4), 1);
    }
    fa_wg_commit();
    fa_wg_wait<0>();
    fa_wg_fence_regs(o);
    if (lane == 0) fa_mbar_arrive(c.empty(ST));
  }

  // l = l_0 + l_1, O / l, LSE: o and lse, or the split's partials.
  FA_DEVICE void finish() {
    float* ssum = c.ssum();
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = fa_lanes_sum<4>(row_l[hh]);
      if (tq == 0) ssum[CW * kR + rw + hh * 8] = l;
    }
    fa_bar_sync(4, 256);
    float inv[2], lse[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = rw + hh * 8;
      const float l = ssum[r] + ssum[kR + r];
      row_end(a, c, r, row_m[hh] == FA_MLA_NEG_INF ? FA_MLA_NEG_INF : row_m[hh] * mul, l, &inv[hh], &lse[hh]);
    }
    write_out<CW>(a, c, o, rw, tq, inv, lse);
  }
};

template <int CW>
FA_DEVICE void consume(const FaFwdArgs& a, const Cta& c, int tid) {
  Consumer<CW> k(a, c, tid);
  const int n_blocks = c.w.n_blocks;
  if (n_blocks > 0) {
    k.start(tid - 128);
    for (int it = 0; it < n_blocks; ++it) k.block(it);
  }
  k.finish();
}

}  // namespace fa_mla

#include "fwd_mla_seesaw.cuh"

extern "C" __global__ void __launch_bounds__(384, 1) fa_kernel(const FaFwdArgs a) {
  using namespace fa_mla;
  extern __shared__ __align__(1024) unsigned char fa_smem_raw[];
  fa_pdl_launch_dependents();  // the combine step may be scheduled under this grid's tail (it waits before reading)
  const int tid = (int)threadIdx.x;
  const int ns = a.num_splits;
  Cta c;
  c.split = (int)blockIdx.y % ns;
  c.g = (int)blockIdx.y / ns;
  c.b = (int)blockIdx.z;
  c.r0 = (int)blockIdx.x * kR;
  c.w = fa_split_work<kR, kBN>(a, c.b, c.r0, c.split, ns);
  if (c.w.rows <= 0) return;                  // uniform: the whole CTA leaves
  fa_require_dyn_smem((unsigned)kSmemBytes);  // the host launches with fa_mla_smem_bytes (fwd_mla_layout.cuh)
  const unsigned raw = fa_sm90_smem(fa_smem_raw);
  c.base = (raw + 1023u) & ~1023u;
  c.gbase = fa_smem_raw + (c.base - raw);
  if constexpr (fa_cfg::kSched == 1) {
    if (tid == 0) {
      for (int x = 0; x < 2; ++x)
        for (int h = 0; h < 2; ++h) {
          fa_mbar_init(ss_full(c, x, h), 32);  // every lane of the half's producer warp, once its copies landed
          fa_mbar_init(ss_empty(c, x, h), 4);  // one arrival per warp of the consumer that reads the half last
        }
      fa_mbar_init_fence();
    }
    __syncthreads();
    seesaw(a, c, tid);
    return;
  }
  if (tid == 0) {
    for (int s = 0; s < kSt; ++s) {
      fa_mbar_init(c.full(s), 64);  // every thread of the stage's producer half, once its copies landed
      fa_mbar_init(c.empty(s), 8);  // one arrival per consumer warp
    }
    fa_mbar_init_fence();
  }
  __syncthreads();
  if (tid < 128) {
    fa_setmaxnreg_dec<kRegP>();
    if (tid < 64) produce<0>(a, c, tid);
    else produce<1>(a, c, tid - 64);
  } else {
    fa_setmaxnreg_inc<kRegC>();
    if (tid < 256) consume<0>(a, c, tid);
    else consume<1>(a, c, tid);
  }
}

#endif  // FA_FWD_MLA_CUH
