// fwd_split.cuh -- the decode forward: split-KV (flash-decoding), GQA packing and paged KV caches (fp16 / bf16,
// sm_80 and later, mma.sync).
//
// Packing: the rows of a CTA are 16 packed rows of one (batch b, KV head g): packed row R = i * group + hq holds
// query token i and query head h = g * group + hq, so every K/V byte a CTA reads serves the whole GQA group (and the
// few query tokens of speculative decoding). Grid: x = split + num_splits * g, y = tile of 16 packed rows, z = b.
// Split-KV: the key blocks (kBlockN keys) that the CTA's rows see, [nb_lo, nb_hi), are cut into num_splits equal
// runs; split s walks run s. The used length (fa_seq_used: seqused_k) decides the blocks on the device, so the grid
// depends on the capacity only (CUDA graphs replay with new lengths).
// Warps split the keys, not the rows: warp w takes keys [w * kBlockN / kWarps, (w + 1) * kBlockN / kWarps) of every
// block with its own running max m, sum l and 16 x dv output O (mma.sync m16n8k16, fp32 accumulators):
//   S = Q K_w^T;  (features: softcap c * tanh(S scale / c), ALiBi - slope_h |i + sk - sq - j|, in log2 units)
//   m' = max(m, rowmax S);  P = exp2(S - m');  l = l exp2(m - m') + rowsum P;  O = O exp2(m - m') + P V_w
// At the end the warps' (m, l, O) are merged in shared memory: m* = max_w m_w, l* = sum_w l_w exp2(m_w - m*),
// O* = sum_w O_w exp2(m_w - m*) / l*, lse = (m* + log2 l*) ln 2. num_splits == 1: O* goes to o (dtype) and lse to
// lse; num_splits > 1: the split's NORMALIZED O* (float32) and its natural-log LSE go to part_o / part_lse (layout
// in fa_args.cuh) and the fwd_combine step merges the splits (common/combine.cuh). A split or row that sees no key
// gives O* = 0, lse = -inf. Attention sinks (kHasSinks): the row's sink column joins O* and lse where they go to o
// (common/sinks.cuh); split partials leave it out and the combine adds it, once.
// Memory: K and V blocks stream through a kStages-deep cp.async pipeline (16-byte copies, one commit group per
// block, rows swizzled or padded as in fwd_mma: smem_layout.cuh). Keys at or past the used length are never read
// (zero-filled, masked). Paged (kPaged): key j of sequence b is row j & (page_size - 1) of page
// block_table[b][j >> page_shift]; the page indices of block t + kStages are copied (4-byte cp.async) into a ring in
// shared memory (2 kStages x kBlockN entries) in the commit group of block t's K / V, so they land before block
// t + kStages is issued and no thread waits on a table read (the prologue's first kStages - 1 blocks read the table
// straight into registers on the fast path, so their copies wait for one table round trip and no barrier); an index
// outside [0, num_pages) masks its keys (never read), so each key row costs one table read and the copies never wait
// for it. Issuing a block, a thread first reads the page indices of its rows (one batch of shared loads, when its rows
// and chunk column are the same for K and V) and computes one element offset per row that serves K and V (same
// strides); a block masks only when one of its rows names a page outside the pool (the loop's barrier is a
// __syncthreads_or of that: on this fast path of bits each thread noted for its rows where it issued them, else of
// a scan of the block's ring entries before the barrier). The shared-memory plan is
// fwd_split_layout.cuh. Masks are bottom-right aligned to the used length: key j is visible to token i iff
// lo(i) <= j < hi(i), lo = i + sk - sq - win_left (win_left >= 0), hi = i + sk - sq + win_right + 1 (win_right >= 0).
// Contiguous caches issue their blocks the same way (one offset per row for K and V). Paged and contiguous caches
// give the same bits (the shared tiles and the arithmetic are identical).
// FP8 KV cache (kKvDtype 4 e4m3 / 5 e5m2, sm_89+, narrow heads): the blocks stream as fp8 bytes through the same
// pipeline (16-byte cp.async chunks of 16 codes, rows past the used length or on a page outside the pool zero-filled)
// into their own slots; after the block's barrier every thread dequantizes chunks in registers (cvt: exact to fp16 /
// bf16, common/fp8.cuh) into one 16-bit K / V tile laid out as the 16-bit path's slots, a barrier, and the MMAs run
// unchanged over that tile (layout: fwd_split_layout.cuh). The scales factor out of the sums, so the tile holds bare
// codes: k_scale[g] joins the softmax scale (S = k_scale * Q K^T), v_scale[g] the final 1 / l (O = v_scale * P V / l).
// Wide heads (> 256: MLA) take fwd_split_wide.cuh's body (64 rows per CTA, warps split dv). Reads fa_cfg: kDtype,
// kKvDtype, kHeadDim, kHeadDimV (<= 576 / 512), kMask, kHasAlibi, kHasSoftcap, kHasLse, kHasSinks, kPaged, kBlockN,
// kWarps, kStages. No bias, no varlen (the family's covers()).
#ifndef FA_FWD_SPLIT_CUH
#define FA_FWD_SPLIT_CUH

#include "common/pdl.cuh"
#include "common/sm80.cuh"
#include "common/fp8.cuh"
#include "common/split.cuh"
#include "fwd_split_layout.cuh"

namespace fa_split {
using namespace fa_sm80;

constexpr int kD = fa_cfg::kHeadDim;
constexpr int kDV = fa_cfg::kHeadDimV;
constexpr int kDPad = fa_split_pad16(kD);
constexpr int kDVPad = fa_split_pad16(kDV);
constexpr int kRows = kFaSplitRows;
constexpr int kBlockN = fa_cfg::kBlockN;
constexpr int kWarps = fa_cfg::kWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = fa_cfg::kStages;
constexpr int kWN = kBlockN / kWarps;  // keys per warp per block
constexpr int kKeyTiles = kWN / 8;     // n8 tiles of S per warp
constexpr int kColTiles = kDVPad / 8;  // n8 tiles of O
constexpr int kKSteps = kDPad / 16;
constexpr bool kQRegs = kDPad <= 128;  // Q fragments held in registers
constexpr int kPitchQ = fa_smem_pitch(kDPad);
constexpr int kPitchK = fa_smem_pitch(kDPad);
constexpr int kPitchV = fa_smem_pitch(kDVPad);
constexpr int kPitchO = fa_split_o_pitch(kDV);
constexpr int kQBytes = fa_split_q_bytes(kD);
constexpr int kKSlot = fa_split_kslot_bytes(kD, kBlockN);
constexpr int kVSlot = fa_split_vslot_bytes(kDV, kBlockN);
constexpr bool kFp8Kv = fa_cfg::kKvDtype == 4 || fa_cfg::kKvDtype == 5;  // an fp8 KV cache (dequantized per block)
constexpr int kSlots = fa_split_slots_bytes(kD, kDV, kBlockN, kWarps, kStages, kFp8Kv);
constexpr int kK8Slot = fa_split_k8slot_bytes(kD, kBlockN);  // fp8 slots (kFp8Kv): rows of kDPad / kDVPad bytes
constexpr int kV8Slot = fa_split_v8slot_bytes(kDV, kBlockN);
constexpr int kRing = 2 * kStages;  // page ring entries (blocks): blocks it .. it + 2 kStages - 1 live
constexpr bool kFeat = fa_cfg::kHasAlibi || fa_cfg::kHasSoftcap;
#define FA_SPLIT_NEG_INF __int_as_float(0xff800000)

constexpr bool kWide = fa_split_wide(kD, kDV);  // MLA-sized heads: fa_split_wide_kernel
static_assert(fa_cfg::kDtype == 1 || fa_cfg::kDtype == 2, "fwd_split: fp16 or bf16 only");
static_assert(fa_cfg::kKvDtype == fa_cfg::kDtype || (kFp8Kv && fa_cfg::kArch >= 89 && !fa_split_wide(kD, kDV)),
              "fwd_split: k / v of q's dtype, or an fp8 cache on sm_89+ at head dims up to 256");
static_assert(kStages >= 2 && kStages <= 4, "fwd_split: 2..4 stages");
static_assert(kD % 8 == 0 && kDV % 8 == 0 && kD <= 576 && kDV <= 512, "fwd_split: head dims");
static_assert(kQBytes % 128 == 0 && kKSlot % 128 == 0 && kVSlot % 128 == 0 && kSlots % 128 == 0,
              "fwd_split: tiles 128-byte aligned");

typedef FaElem<fa_cfg::kDtype> E;

// The thread -> (row, chunk) map of a block copy of PCOLS padded columns: regular when every thread keeps one chunk
// column and walks rows tid / kChunks + i * kStep (i < kIters), so K and V (same padded width) share the rows.
template <int PCOLS>
struct RowMap {
  static constexpr int kChunks = PCOLS / 8;
  static constexpr int kStep = kThreads / kChunks;  // rows per pass of all threads
  static constexpr bool kRegular = kThreads % kChunks == 0 && kStep > 0 && kBlockN % kStep == 0;
  static constexpr int kIters = kRegular ? kBlockN / kStep : 1;
};
// Fast issue path (paged and contiguous): K and V rows of a block copied together, one element offset per row for
// both (same strides), paged from page indices held in registers (one batch of shared loads per block), when the
// maps are regular and equal.
constexpr bool kFastIssue = RowMap<kDPad>::kRegular && kDPad == kDVPad && !kFp8Kv;

// Copies one block of ROWS rows x COLS columns (padded to PCOLS, zero-filled beyond COLS) into a slot, 16 bytes a
// copy: row r comes from row_src(r) (null: zero-filled; `dummy` is any valid address, never read). EB: the element's
// bytes: 2 (fp16 / bf16: 8 elements a copy, rows at PITCH in the swizzled / padded layout) or 1 (an fp8 slot: 16 codes
// a copy, rows of PCOLS bytes unpadded; a chunk that ends past COLS copies its 8 real bytes and zero-fills the rest,
// so no code of the next head is read).
template <int COLS, int PCOLS, int PITCH, int EB, class RowSrc>
FA_DEVICE void load_block(unsigned sdst, int tid, const void* dummy, RowSrc row_src) {
  constexpr int kPer = 16 / EB;  // elements a copy
  constexpr int kChunks = PCOLS / kPer;
  constexpr int kTotal = kBlockN * kChunks;
  // Partly unrolled: a full unroll keeps every row address live at once (255 registers and spills at d > 128).
#pragma unroll 4
  for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
    const int idx = tid + it * kThreads;
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int r = idx / kChunks, ch = idx % kChunks;
      const unsigned char* src = (const unsigned char*)row_src(r);
      const bool ok = src != nullptr && (PCOLS == COLS || ch * kPer < COLS);
      // 16-bit rows end on a copy (COLS a multiple of 8); an fp8 row of COLS % 16 == 8 ends half way into one
      const int bytes = !ok ? 0 : (PCOLS == COLS || EB == 2) ? 16 : min(16, (COLS - ch * kPer) * EB);
      unsigned dst;
      if constexpr (EB == 1) dst = (unsigned)(r * PCOLS + ch * 16);
      else dst = fa_smem_off<PITCH>(r, ch);
      cp_async16(sdst + dst, bytes > 0 ? (const void*)(src + ch * 16) : dummy, bytes);
    }
  }
}

// Copies the tile's ROWS packed rows of Q (zero-filled past `rows` and past head_dim) into sQ (pitch kPitchQ) and
// commits them as one group.
template <int ROWS>
FA_DEVICE void load_q(const FaFwdArgs& a, unsigned sQ, int tid, int b, int g, int r0, int rows) {
  constexpr int kChunks = kDPad / 8;
  const int group = a.group;
  for (int idx = tid; idx < ROWS * kChunks; idx += kThreads) {
    const int r = idx / kChunks, ch = idx % kChunks;
    const int R = r0 + r;
    const bool ok = r < rows && ch * 8 < kD;
    const unsigned short* src = nullptr;
    if (ok) {
      const int i = R / group, h = g * group + (R - (R / group) * group);
      src = (const unsigned short*)a.q + (long long)b * a.q_sb + (long long)i * a.q_ss + (long long)h * a.q_sh + ch * 8;
    }
    cp_async16(sQ + fa_smem_off<kPitchQ>(r, ch), ok ? (const void*)src : a.q, ok ? 16 : 0);
  }
  cp_commit();
}

// Dequantizes the fp8 block at byte offset src (rows of PCOLS codes) into the 16-bit tile at byte offset dst (pitch
// PITCH, the layout of the 16-bit slots): 16 codes a thread at a time, in registers. The scales stay out (the caller
// applies them to the sums).
template <int PCOLS, int PITCH>
FA_DEVICE void dequant_block(unsigned char* smem, unsigned src, unsigned dst, int tid) {
  constexpr int kChunks = PCOLS / 16;
  constexpr int kTotal = kBlockN * kChunks;
#pragma unroll 2
  for (int idx = tid; idx < kTotal; idx += kThreads) {
    const int r = idx / kChunks, ch = idx % kChunks;
    const uint4 in = *(const uint4*)(smem + src + r * PCOLS + ch * 16);
    const unsigned w[4] = {in.x, in.y, in.z, in.w};
    unsigned o[8];
    fa_fp8x16_to_16x16<fa_cfg::kKvDtype, fa_cfg::kDtype>(w, o);
    *(uint4*)(smem + dst + fa_smem_off<PITCH>(r, 2 * ch)) = make_uint4(o[0], o[1], o[2], o[3]);
    *(uint4*)(smem + dst + fa_smem_off<PITCH>(r, 2 * ch + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

// Row j of the K (or V) cache of (b, g) for load_block: pool + base (contiguous: the sequence's row 0),
// or page pr[r] of the pool (paged; page strides sb / ss / sh); null (zero-filled, never read) past the used length or
// on a page outside the pool. P: the element type (16-bit patterns, or fp8 bytes).
template <class P>
FA_DEVICE const P* kv_row(const FaFwdArgs& a, const P* pool, long long base, long long sb, long long ss, long long sh,
                          int g, const int* pr, int r, int j, int key_hi) {
  if (j >= key_hi) return nullptr;
  if constexpr (fa_cfg::kPaged) {
    const int p = pr[r];
    if ((unsigned)p >= (unsigned)a.num_pages) return nullptr;  // outside the pool: never read
    return pool + (long long)p * sb + (long long)(j & (a.page_size - 1)) * ss + (long long)g * sh;
  } else {
    return pool + base + (long long)j * ss;
  }
}

// Page indices of step `blk` of the run (its rows below key_hi) into ring entry blk % RING: by 4-byte cp.async in the
// caller's commit group (ASYNC), or by plain loads (the prologue).
template <int RING, bool ASYNC>
FA_DEVICE void ring_load(const FaFwdArgs& a, int* ring, const int* bt, int tid, int blk, int blk0, int key_hi) {
  constexpr int kPgPer = (kBlockN + kThreads - 1) / kThreads;
  int* pw = ring + (blk % RING) * kBlockN;
#pragma unroll
  for (int t = 0; t < kPgPer; ++t) {
    const int r = tid + t * kThreads;
    const int j = (blk0 + blk) * kBlockN + r;
    if (r < kBlockN && j < key_hi) {
      if constexpr (ASYNC) cp_async4(smem_u32(pw + r), bt + (j >> a.page_shift), 4);
      else pw[r] = bt[j >> a.page_shift];
    }
  }
}

// The narrow kernel (head dims <= 256): warps split the keys (the header comment).
template <int kUnused>
FA_DEVICE void narrow_kernel(const FaFwdArgs& a) {
  static_assert(kUnused == 0 && kWN % 16 == 0, "fwd_split: 16 or more keys per warp (multiple of 16)");
  static_assert(kUnused == 0 && kD <= 256 && kDV <= 256, "fwd_split: narrow head dims");
  extern __shared__ __attribute__((aligned(128))) unsigned char fa_smem[];
  typedef unsigned short T;

  const int tid = (int)threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int ns = a.num_splits;
  const int split = (int)blockIdx.x % ns, g = (int)blockIdx.x / ns;
  const int b = (int)blockIdx.z;
  const int group = a.group;
  const int r0 = (int)blockIdx.y * kRows;  // first packed row of the tile
  const FaSplitWork w = fa_split_work<kRows, kBlockN>(a, b, r0, split, ns);
  if (w.rows <= 0) return;
  const int sq = w.sq, sk = w.sk, rows = w.rows, packed = sq * group;
  const int key_hi = w.key_hi, full_lo = w.full_lo, full_hi = w.full_hi, blk0 = w.blk0, n_blocks = w.n_blocks;
  const unsigned sQ = smem_u32(fa_smem);
  // 16-bit: kStages K slots, then kStages V slots. fp8 cache: the one 16-bit K / V tile, then the fp8 slots.
  const unsigned sK = sQ + (unsigned)kQBytes;
  const unsigned sV = sK + (unsigned)(kFp8Kv ? kKSlot : kStages * kKSlot);
  [[maybe_unused]] const unsigned k8_off = (unsigned)(kQBytes + kKSlot + kVSlot);  // byte offsets from fa_smem
  [[maybe_unused]] const unsigned v8_off = k8_off + (unsigned)(kStages * kK8Slot);
  int* ring = (int*)(fa_smem + kQBytes + kSlots);  // [kRing][kBlockN] page indices (-1: outside the pool)

  const long long kbase_off = (long long)b * a.k_sb + (long long)g * a.k_sh;  // contiguous: the sequence's row 0
  const long long vbase_off = (long long)b * a.v_sb + (long long)g * a.v_sh;
  const T* kpool = (const T*)a.k;
  const T* vpool = (const T*)a.v;
  const int* bt = fa_cfg::kPaged ? a.block_table + (long long)b * a.bt_stride : nullptr;

  const int gq = lane >> 2, tq = lane & 3;  // mma fragment coordinates
  const int wk0 = warp * kWN;               // this warp's first key inside a block

  float o_acc[kColTiles][4];
#pragma unroll
  for (int n = 0; n < kColTiles; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.f;
  float row_m[2] = {FA_SPLIT_NEG_INF, FA_SPLIT_NEG_INF}, row_l[2] = {0.f, 0.f};
  // An fp8 cache's scales factor out of the sums: k_scale into the softmax scale, v_scale into the final 1 / l.
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kFp8Kv) {
    if (a.k_scale != nullptr) k_scale = a.k_scale[(long long)g * a.k_scale_sh];
    if (a.v_scale != nullptr) v_scale = a.v_scale[(long long)g * a.v_scale_sh];
  }
  const float scale = kFp8Kv ? a.scale * k_scale : a.scale;
  const float mul = kFeat    ? 1.f
                    : kFp8Kv ? a.scale_log2 * k_scale
                             : a.scale_log2;  // feature-path scores are
                                              // already scaled, in log2 units

  if (n_blocks > 0) {
    load_q<kRows>(a, sQ, tid, b, g, r0, rows);  // Q: the tile's packed rows (zero-filled past the last row)
    // Fast issue path facts: K and V with the same strides (one offset per row), the page mask, the head.
    [[maybe_unused]] const bool kv_same = a.k_sb == a.v_sb && a.k_ss == a.v_ss && a.k_sh == a.v_sh;
    [[maybe_unused]] const int pmask = a.page_size - 1;
    [[maybe_unused]] const long long ghead = (long long)g * a.k_sh;
    // ---- page indices (paged): blocks 0..kStages-1 read here; block t + kStages joins the commit group of block
    // t's K / V copies (4-byte cp.async into the ring), so it lands before block t + kStages is issued ----
    auto table_async = [&](int blk) {
      if (blk < n_blocks) ring_load<kRing, true>(a, ring, bt, tid, blk, blk0, key_hi);
    };
    [[maybe_unused]] bool ring_synced = true;  // the ring's prologue entries are visible to every thread
    if constexpr (fa_cfg::kPaged) {
#pragma unroll
      for (int s = 0; s < kStages; ++s)
        if (s < n_blocks) ring_load<kRing, false>(a, ring, bt, tid, s, blk0, key_hi);
      // The fast issue path reads the prologue blocks' page indices from the table itself, so their copies need
      // not wait for the ring (a barrier after a table round trip); the loop's first barrier publishes the ring.
      if constexpr (kFastIssue) ring_synced = !kv_same;
      if (ring_synced) __syncthreads();
    }
    // Fast issue path, paged: bit s set when the block in pipeline slot s has a row (inside the used length) on a
    // page outside the pool, noted where the block's copies are issued; the block's barrier ORs the threads' bits.
    [[maybe_unused]] unsigned bad_bits = 0;
    // Issues the copies of block `it` (one commit group, empty past the last block).
    auto issue = [&](int it) {
      if (it < n_blocks) {
        const int slot = it % kStages;
        const int kn = (blk0 + it) * kBlockN;
        const int* pr = ring + (it % kRing) * kBlockN;
        if constexpr (kFp8Kv) {  // fp8 codes into the block's fp8 slots (dequantized when the block is computed)
          const unsigned char* k8 = (const unsigned char*)a.k;
          const unsigned char* v8 = (const unsigned char*)a.v;
          load_block<kD, kDPad, 0, 1>(smem_u32(fa_smem + k8_off + slot * kK8Slot), tid, k8, [&](int r) {
            return kv_row(a, k8, kbase_off, a.k_sb, a.k_ss, a.k_sh, g, pr, r, kn + r, key_hi);
          });
          load_block<kDV, kDVPad, 0, 1>(smem_u32(fa_smem + v8_off + slot * kV8Slot), tid, v8, [&](int r) {
            return kv_row(a, v8, vbase_off, a.v_sb, a.v_ss, a.v_sh, g, pr, r, kn + r, key_hi);
          });
          if constexpr (fa_cfg::kPaged) table_async(it + kStages);
          cp_commit();
          return;
        }
        if constexpr (kFastIssue) {
          if (kv_same) {
            // Page indices of the thread's rows first (shared loads back to back, then no shared read between the
            // copies; the prologue's blocks read the table instead); one element offset per row serves K and V
            // (same strides); rows past the used length or on a page outside the pool zero-fill.
            typedef RowMap<kDPad> M;
            const int rb = tid / M::kChunks, ch = tid % M::kChunks;
            const bool col_ok = kDPad == kD || ch * 8 < kD;
            int pg[M::kIters];
            if constexpr (fa_cfg::kPaged) {
              if (it < kStages - 1) {
#pragma unroll
                for (int i = 0; i < M::kIters; ++i) {
                  const int j = kn + rb + i * M::kStep;
                  pg[i] = j < key_hi ? bt[j >> a.page_shift] : 0;
                }
              } else {
#pragma unroll
                for (int i = 0; i < M::kIters; ++i) pg[i] = pr[rb + i * M::kStep];
              }
            } else {
#pragma unroll
              for (int i = 0; i < M::kIters; ++i) pg[i] = 0;
            }
            const unsigned dk = sK + (unsigned)(slot * kKSlot), dv = sV + (unsigned)(slot * kVSlot);
            [[maybe_unused]] unsigned bad = 0;
#pragma unroll
            for (int i = 0; i < M::kIters; ++i) {
              const int r = rb + i * M::kStep;
              const int j = kn + r;
              const bool page_ok = !fa_cfg::kPaged || (unsigned)pg[i] < (unsigned)a.num_pages;
              if constexpr (fa_cfg::kPaged) bad |= j < key_hi && !page_ok;
              const bool ok = col_ok && j < key_hi && page_ok;
              const long long off = fa_cfg::kPaged
                                        ? (long long)pg[i] * a.k_sb + (long long)(j & pmask) * a.k_ss + ghead + ch * 8
                                        : kbase_off + (long long)j * a.k_ss + ch * 8;
              cp_async16(dk + fa_smem_off<kPitchK>(r, ch), ok ? (const void*)(kpool + off) : kpool, ok ? 16 : 0);
              cp_async16(dv + fa_smem_off<kPitchV>(r, ch), ok ? (const void*)(vpool + off) : vpool, ok ? 16 : 0);
            }
            if constexpr (fa_cfg::kPaged) {
              bad_bits = (bad_bits & ~(1u << slot)) | (bad << slot);
              table_async(it + kStages);
            }
            cp_commit();
            return;
          }
        }
        load_block<kD, kDPad, kPitchK, 2>(sK + (unsigned)(slot * kKSlot), tid, kpool, [&](int r) {
          return kv_row(a, kpool, kbase_off, a.k_sb, a.k_ss, a.k_sh, g, pr, r, kn + r, key_hi);
        });
        load_block<kDV, kDVPad, kPitchV, 2>(sV + (unsigned)(slot * kVSlot), tid, vpool, [&](int r) {
          return kv_row(a, vpool, vbase_off, a.v_sb, a.v_ss, a.v_sh, g, pr, r, kn + r, key_hi);
        });
        if constexpr (fa_cfg::kPaged) table_async(it + kStages);
      }
      cp_commit();
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);

    // Per-lane row facts (rows gq and gq + 8 of the tile): token, visible key range, ALiBi slope (log2 units).
    int lo_r[2], hi_r[2];
    float slope_r[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int R = r0 + gq + hh * 8;
      const int i = R / group;
      lo_r[hh] = 0;
      hi_r[hh] = sk;
      if constexpr (fa_cfg::kMask != 0) {
        if (a.win_left >= 0) lo_r[hh] = i + sk - sq - a.win_left;
        if (a.win_right >= 0) hi_r[hh] = min(sk, i + sk - sq + a.win_right + 1);
      }
      slope_r[hh] = 0.f;
      if constexpr (fa_cfg::kHasAlibi) {
        const int h = g * group + (R - i * group);
        slope_r[hh] = R < packed ? a.alibi[h] * 1.4426950408889634f : 0.f;
      }
    }

    const unsigned q_lane = fa_smem_lane<kPitchQ>(sQ, lane & 15, lane >> 4);
    const unsigned k_lane = fa_smem_lane<kPitchK>(0u, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const unsigned v_lane = fa_smem_lane<kPitchV>(0u, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
    unsigned q_frag[kQRegs ? kKSteps : 1][4];

    for (int it = 0; it < n_blocks; ++it) {
      const int slot = it % kStages;
      const int kn = (blk0 + it) * kBlockN;
      cp_wait<kStages - 2>();
      // Paged: whether a row of this block (inside the used length) names a page outside the pool, decided by the
      // block barrier itself: on the fast issue path from the bits each thread noted where it issued its rows (no
      // shared read before the barrier), else from a scan of the block's ring entries (landed with an earlier
      // group); blocks without one mask like contiguous ones (the same bits).
      int bad = 0;
      if constexpr (fa_cfg::kPaged) {
        if (kFastIssue && kv_same) {
          bad = (int)((bad_bits >> slot) & 1u);
        } else {
          const int* prm = ring + (it % kRing) * kBlockN;
          for (int r = tid; r < kBlockN; r += kThreads)
            if (kn + r < key_hi && (unsigned)prm[r] >= (unsigned)a.num_pages) bad = 1;
        }
      }
      const bool blk_bad = fa_cfg::kPaged ? __syncthreads_or(bad) != 0 : (__syncthreads(), false);
      issue(it + kStages - 1);
      if constexpr (kFp8Kv) {  // the block's codes -> the 16-bit tile (every warp is past the previous block's MMAs)
        dequant_block<kDPad, kPitchK>(fa_smem, k8_off + slot * kK8Slot, (unsigned)kQBytes, tid);
        dequant_block<kDVPad, kPitchV>(fa_smem, v8_off + slot * kV8Slot, (unsigned)(kQBytes + kKSlot), tid);
        __syncthreads();
      }
      const int tile = kFp8Kv ? 0 : slot;  // the 16-bit slot the MMAs read
      if constexpr (kQRegs) {
        if (it == 0) {
#pragma unroll
          for (int ks = 0; ks < kKSteps; ++ks)
            ldsm_x4(fa_smem_at<kPitchQ>(q_lane, 0, ks * 16), q_frag[ks][0], q_frag[ks][1], q_frag[ks][2],
                    q_frag[ks][3]);
        }
      }
      // ---- S = Q K_w^T ----
      float s[kKeyTiles][4];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      const unsigned kb = sK + (unsigned)(tile * kKSlot) + k_lane;
      if constexpr (kQRegs) {
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
          for (int np = 0; np < kKeyTiles / 2; ++np) {
            unsigned b0, b1, b2, b3;
            ldsm_x4(fa_smem_at<kPitchK>(kb, wk0 + np * 16, ks * 16), b0, b1, b2, b3);
            mma16816(s[2 * np], q_frag[ks], b0, b1);
            mma16816(s[2 * np + 1], q_frag[ks], b2, b3);
          }
        }
      } else {
        // Large head dims: Q from shared memory, two k steps per round (a full unroll hoists every fragment load
        // and runs out of registers).
#pragma unroll 2
        for (int ks = 0; ks < kKSteps; ++ks) {
          unsigned qa[4];
          ldsm_x4(fa_smem_at<kPitchQ>(q_lane, 0, ks * 16), qa[0], qa[1], qa[2], qa[3]);
#pragma unroll
          for (int np = 0; np < kKeyTiles / 2; ++np) {
            unsigned b0, b1, b2, b3;
            ldsm_x4(fa_smem_at<kPitchK>(kb, wk0 + np * 16, ks * 16), b0, b1, b2, b3);
            mma16816(s[2 * np], qa, b0, b1);
            mma16816(s[2 * np + 1], qa, b2, b3);
          }
        }
      }
      // ---- features (log2 units) ----
      if constexpr (kFeat) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = (r0 + gq + hh * 8) / group;
#pragma unroll
          for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = kn + wk0 + n * 8 + tq * 2 + e;
              float x = s[n][hh * 2 + e] * scale;
              if constexpr (fa_cfg::kHasSoftcap) x = a.softcap * fa_tanh(x * a.inv_softcap);
              x *= 1.4426950408889634f;
              if constexpr (fa_cfg::kHasAlibi) x -= slope_r[hh] * fabsf((float)(i + sk - sq - j));
              s[n][hh * 2 + e] = x;
            }
        }
      }
      // ---- masking: blocks crossing the band or the used length; pages outside the pool ----
      const bool need_mask = blk_bad || kn < full_lo || kn + kBlockN > full_hi;
      if (need_mask) {
        const int* pr = ring + (it % kRing) * kBlockN;
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int jl = wk0 + n * 8 + tq * 2 + e;
            const int j = kn + jl;
            const bool page_ok = !fa_cfg::kPaged || (unsigned)pr[jl] < (unsigned)a.num_pages;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
              if (!page_ok || j < lo_r[hh] || j >= hi_r[hh]) s[n][hh * 2 + e] = FA_SPLIT_NEG_INF;
          }
      }
      // ---- online softmax (base 2) ----
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = row_m[hh];
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) mx = fmaxf(mx, fmaxf(s[n][hh * 2], s[n][hh * 2 + 1]));
        mx = fa_lanes_max<4>(mx);
        const float ms = mx == FA_SPLIT_NEG_INF ? 0.f : mx * mul;
        const float corr = fa_exp2(row_m[hh] * mul - ms);
        row_m[hh] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) {
          const float p0 = fa_exp2(s[n][hh * 2] * mul - ms);
          const float p1 = fa_exp2(s[n][hh * 2 + 1] * mul - ms);
          s[n][hh * 2] = p0;
          s[n][hh * 2 + 1] = p1;
          sum += p0 + p1;
        }
        row_l[hh] = row_l[hh] * corr + sum;
#pragma unroll
        for (int n = 0; n < kColTiles; ++n) {
          o_acc[n][hh * 2] *= corr;
          o_acc[n][hh * 2 + 1] *= corr;
        }
      }
      // ---- O += P V_w ----
      const unsigned vb = sV + (unsigned)(tile * kVSlot) + v_lane;
#pragma unroll
      for (int kk = 0; kk < kWN / 16; ++kk) {
        unsigned p[4];
        p[0] = pack2(s[2 * kk][0], s[2 * kk][1]);
        p[1] = pack2(s[2 * kk][2], s[2 * kk][3]);
        p[2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < kColTiles / 2; ++dp) {
          unsigned b0, b1, b2, b3;
          ldsm_x4_t(fa_smem_at<kPitchV>(vb, wk0 + kk * 16, dp * 16), b0, b1, b2, b3);
          mma16816(o_acc[2 * dp], p, b0, b1);
          mma16816(o_acc[2 * dp + 1], p, b2, b3);
        }
      }
    }
    cp_wait<0>();
  }

  // ---- merge the warps' (m, l, O) in shared memory (the K/V slots are free now) ----
  __syncthreads();
  float* sO = (float*)(fa_smem + kQBytes);
  float* sM = sO + kWarps * kRows * kPitchO;
  float* sL = sM + kWarps * kRows;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = gq + hh * 8;
    const float l = fa_lanes_sum<4>(row_l[hh]);
    if (tq == 0) {
      sM[warp * kRows + r] = row_m[hh] == FA_SPLIT_NEG_INF ? FA_SPLIT_NEG_INF : row_m[hh] * mul;
      sL[warp * kRows + r] = l;
    }
    float* orow = sO + (warp * kRows + r) * kPitchO;
#pragma unroll
    for (int n = 0; n < kColTiles; ++n)
      *(float2*)(orow + n * 8 + tq * 2) = make_float2(o_acc[n][hh * 2], o_acc[n][hh * 2 + 1]);
  }
  __syncthreads();
  constexpr int kQuads = kDV / 4;  // 4-column groups of a row
  const bool split_out = ns > 1;
  for (int idx = tid; idx < kRows * kQuads; idx += kThreads) {
    const int r = idx / kQuads, c4 = idx % kQuads;
    if (r >= rows) continue;
    float m = FA_SPLIT_NEG_INF;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sM[w * kRows + r]);
    float l = 0.f, o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
    if (m != FA_SPLIT_NEG_INF) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = fa_exp2(sM[w * kRows + r] - m);
        const float4 x = *(const float4*)(sO + (w * kRows + r) * kPitchO + c4 * 4);
        l += sL[w * kRows + r] * f;
        o0 += x.x * f;
        o1 += x.y * f;
        o2 += x.z * f;
        o3 += x.w * f;
      }
    }
    const int R = r0 + r;
    const int i = R / group, h = g * group + (R - i * group);
    float inv = l > 0.f ? (kFp8Kv ? v_scale / l : 1.f / l) : 0.f;
    float lse = (l > 0.f && m != FA_SPLIT_NEG_INF) ? (m + __log2f(l)) * 0.6931471805599453f : FA_SPLIT_NEG_INF;
    if constexpr (fa_cfg::kHasSinks) {  // the sink column, once per row: here without splits, else in the combine
      if (!split_out) {
        const FaRowEnd e = fa_sink_row_end(m, l, a.sinks[h]);
        inv = kFp8Kv ? v_scale * e.o_mul : e.o_mul;
        lse = e.lse;
      }
    }
    o0 *= inv;
    o1 *= inv;
    o2 *= inv;
    o3 *= inv;
    if (split_out) {
      const long long row = (((long long)split * a.batch + b) * a.heads_q + h) * a.seqlen_q + i;
      *(float4*)(a.part_o + row * kDV + c4 * 4) = make_float4(o0, o1, o2, o3);
      if (c4 == 0) a.part_lse[row] = lse;
    } else {
      T* op = (T*)a.o + (long long)b * a.o_sb + (long long)i * a.o_ss + (long long)h * a.o_sh + c4 * 4;
      uint2 v;
      v.x = pack2(o0, o1);
      v.y = pack2(o2, o3);
      *(uint2*)op = v;
      if constexpr (fa_cfg::kHasLse) {
        if (c4 == 0 && a.lse != nullptr) a.lse[(long long)b * a.lse_sb + (long long)h * a.lse_sh + i] = lse;
      }
    }
  }
}

}  // namespace fa_split

#include "fwd_split_wide.cuh"

extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaFwdArgs a) {
  // The combine step (sm_90) may be scheduled once every CTA of this grid has started: it waits for this grid's
  // completion before it reads, and its CTAs take the SM slots that the last wave leaves idle.
  fa_pdl_launch_dependents();
  if constexpr (fa_split::kWide) {
    // v = the first head_dim_v columns of k (MLA's latent cache): V read from the K tiles, deeper pipeline
    if constexpr (fa_split::kDV <= fa_split::kD) {
      if (a.v == a.k && a.v_sb == a.k_sb && a.v_ss == a.k_ss && a.v_sh == a.k_sh) {
        fa_split::wide_kernel<0, true>(a);
        return;
      }
    }
    fa_split::wide_kernel<0, false>(a);
  } else fa_split::narrow_kernel<0>(a);
}

#endif  // FA_FWD_SPLIT_CUH
