// common/hopper_v_transpose.cuh -- the fp8 forward's V^T: fp8 wgmma reads both operands K-major, so O += P V needs V
// with the keys contiguous. Warps of the producer warpgroup (FaWgVTranspose, beside the TMA warp) transpose every V
// block from its TMA stage into a V^T stage of a ring of their own, as the consumers need them.
//
// Layouts (shared-window addresses, every stage 1024-byte aligned, 128-byte swizzle: the 16-byte unit u of a 128-byte
// row r sits at unit u ^ (r % 8)):
//   V stage (TMA, K::kVBytes):   chunk c = col / 128 of K::kBN rows (keys) x 128 bytes (columns);
//   V^T stage (K::kVtBytes):     chunk a = k / 128 of K::kVtRows rows (V's columns n) x 128 bytes, byte k % 128 of row
//                                n holding V[key8(k)][n]: the reduction order of common/hopper_p_fp8.cuh (inside each
//                                16-key group, position 4 t + e holds key 2 t + (e & 1) + 8 (e >> 1)).
// The wgmma B descriptor of 32-key step kk is then fa_wg_desc_sw128(vt + (kk / 4) * kVtRows * 128 + (kk % 4) * 32,
// 16, 1024), N = V's columns, as K's in S = Q K^T.
// One unit of work is 16 keys (group g) x 32 columns (group h) and one ldmatrix / stmatrix pair per warp:
//   ldmatrix.x4.trans (b16) of the four 8x8 b16 matrices (keys 16 g + 0..7 | 8..15) x (bytes 32 h + 0..15 | 16..31):
//     lane (c = lane / 4, q = lane % 4) gets in register m the bytes V[2q][2c], V[2q][2c+1], V[2q+1][2c],
//     V[2q+1][2c+1] of matrix m (keys relative to the matrix, columns to its 16);
//   two prmt per column pair: e = bytes 0, 2 of r0 and r1 (column 2c: keys 2q, 2q+1, 8+2q, 9+2q, exactly the V^T
//     positions 4q .. 4q+3 of the group), o = bytes 1, 3 (column 2c + 1); the same of r2, r3 for columns 16 + 2c, +1;
//   stmatrix.x4 (b16) writes those words as bytes 4q .. 4q+3 of V^T rows: matrix 0 / 1 take the even / odd column of
//     lanes c < 4 and the odd / even one of lanes c >= 4, so that each matrix's 8 rows (n % 8 all different) fall in
//     8 different 16-byte units: no bank conflict on either side.
// Ordering: each V stage is waited for on its full barrier (TMA) and released on its empty barrier by every
// transposer warp (FaWgBars: v_releases = kTw); a V^T stage waits for its release by every consumer warp, and after
// the stores each writing thread fences its generic-proxy stores to the async proxy (wgmma) before its warp's arrival
// on the stage's full barrier (kTw arrivals).
// K (the kernel's constexpr config) provides: kStages, kBN, kVBytes, kVtBytes, kVtRows, kDVt (V's columns
// transposed, a multiple of 32), kTw (transposer warps) (and what FaTileSched reads). Needs common/sm80.cuh
// (ldsm_x4_t), common/sm90.cuh, common/sm90_fp8.cuh, common/hopper_tile_sched.cuh, common/hopper_kv_ring.cuh.
#ifndef FA_COMMON_HOPPER_V_TRANSPOSE_CUH
#define FA_COMMON_HOPPER_V_TRANSPOSE_CUH

// The V^T ring's mbarriers at `base` (8 bytes each): full[kStages] (every transposer warp has written the stage),
// empty[kStages] (every consumer warp is done with it).
template <int kStages>
struct FaVtBars {
  unsigned base;
  FA_DEVICE unsigned full(int s) const { return base + 8u * s; }
  FA_DEVICE unsigned empty(int s) const { return base + 8u * (kStages + s); }
  static constexpr int kBytes = 16 * kStages;
  // One thread, before the CTA barrier that publishes FaWgBars::init's fence.
  FA_DEVICE void init(unsigned writers, unsigned releases) const {
    for (int s = 0; s < kStages; ++s) {
      fa_mbar_init(full(s), writers);
      fa_mbar_init(empty(s), releases);
    }
  }
};

// The transposer warps (warps 1 .. K::kTw of the producer warpgroup): run() walks the CTA's tiles as the producer does
// and transposes each visited V block, in visiting order.
template <class K>
struct FaWgVTranspose {
  const FaTileSched<K>& sch;
  FaWgBars<K::kStages> bar;
  FaVtBars<K::kStages> vt_bar;
  unsigned v_smem, vt_smem;  // stage 0 of V (TMA) and of V^T
  int tw, lane;              // this warp among the transposer warps, its lane
  FaRingPos<K::kStages> v, vt;

  static constexpr int kGroups = K::kBN / 16;  // 16-key groups
  static constexpr int kUnits = kGroups * (K::kDVt / 32);
  // (a kernel without transposer warps, kTw 0, may still name the type in a discarded branch: nothing to check)
  static_assert(K::kTw == 0 || (K::kBN % 32 == 0 && K::kDVt % 32 == 0),
                "FaWgVTranspose: 32-key steps and 32-column groups");

  // Unit u (key group g, column group h) of V stage `vs` into V^T stage `ts`.
  FA_DEVICE void unit(int u, unsigned vbase, unsigned tbase, unsigned sel_a, unsigned sel_b) const {
    const int g = u % kGroups, h = u / kGroups;
    const int i = lane >> 3, j = lane & 7;
    // ldmatrix: this lane's row of matrix i: key 16 g + 8 (i & 1) + j, bytes 32 h + 16 (i >> 1) .. + 15
    const int key = 16 * g + 8 * (i & 1) + j;
    const int cu = 2 * h + (i >> 1);  // the 16-byte unit of V's row, over the chunks
    const unsigned src = vbase + (unsigned)((cu >> 3) * K::kBN * 128 + key * 128 + (((cu & 7) ^ j) << 4));
    unsigned r0, r1, r2, r3;
    fa_sm80::ldsm_x4_t(src, r0, r1, r2, r3);
    // stmatrix: this lane's row of matrix i: V^T row n (its column pair chosen by (j >> 2) & 1), key group g's unit
    const int n = 32 * h + 16 * (i >> 1) + 2 * j + ((i & 1) ^ ((j >> 2) & 1));
    const unsigned dst = tbase + (unsigned)((g >> 3) * K::kVtRows * 128 + n * 128 + (((g & 7) ^ (n & 7)) << 4));
    fa_stsm_x4(dst, fa_prmt(r0, r1, sel_a), fa_prmt(r0, r1, sel_b), fa_prmt(r2, r3, sel_a), fa_prmt(r2, r3, sel_b));
  }

  // The next visited V block: wait for its TMA stage and a free V^T stage, transpose, publish, release.
  FA_DEVICE void block() {
    // the even column (bytes 0, 2 of each register) for matrices 0 / 2 where lane / 4 < 4, the odd one (bytes 1, 3)
    // elsewhere; matrices 1 / 3 take the other
    const bool odd = ((lane >> 4) & 1) != 0;
    const unsigned sel_a = odd ? 0x7531u : 0x6420u, sel_b = odd ? 0x6420u : 0x7531u;
    fa_mbar_wait(bar.v_full(v.stage), v.phase);
    fa_mbar_wait(vt_bar.empty(vt.stage), vt.phase ^ 1u);
    const unsigned vbase = v_smem + (unsigned)(v.stage * K::kVBytes);
    const unsigned tbase = vt_smem + (unsigned)(vt.stage * K::kVtBytes);
#pragma unroll 2
    for (int u = tw; u < kUnits; u += K::kTw) unit(u, vbase, tbase, sel_a, sel_b);
    fa_fence_proxy_async();  // the stores feed wgmma (async proxy)
    __syncwarp();
    if (lane == 0) {
      fa_mbar_arrive(bar.v_empty(v.stage));
      fa_mbar_arrive(vt_bar.full(vt.stage));
    }
    v.advance();
    vt.advance();
  }

  // Every tile of this CTA: its visited V blocks, as the producer loads them.
  FA_DEVICE void run() {
    for (int t = sch.t_first; t < sch.total; t += sch.t_step) {
      FaTile T = sch.at(t);
      sch.count_visits(T);
      for (int it = 0; it < T.n_blocks; ++it) block();
    }
  }
};

#endif  // FA_COMMON_HOPPER_V_TRANSPOSE_CUH
