// common/hopper_bwd_ring.cuh -- the TMA producer side of a Hopper backward CTA (bwd_wgmma): its shared memory, its
// mbarriers and the producer warp.
// K_n and V_n (the CTA's key block, K::kBN rows in 64-column chunks of 128-byte-swizzled rows) are loaded once, on
// kv_full, before the first tile (none without tiles). Per tile (common/hopper_bwd_sched.cuh's order) Q_m and dO_m
// go by TMA into the next slot of a K::kStages-deep ring (64-row chunks of K::kBM * 128 bytes) and LSE_m (base 2;
// +inf hides rows past seqlen_q and fully masked rows) and Delta_m (bwd_pre) by plain loads into the slot's float
// arrays. Each slot has a full mbarrier (lane 0's arrival with the transaction bytes, then the warp's 32 after LSE /
// Delta: 33) and an empty one (one arrival per consumer warp); the ring is walked with common/hopper_kv_ring.cuh's
// FaRingPos (producer: empty at parity phase ^ 1; consumers: full at parity phase).
// K (the kernel's constexpr config) provides: kBM, kBN, kD, kStages, kQBytes, kKVBytes (and what FaBwdSched reads).
// Needs common/sm90.cuh, common/hopper_kv_ring.cuh (FaRingPos), common/hopper_bwd_sched.cuh, fa_tma_args.cuh.
#ifndef FA_COMMON_HOPPER_BWD_RING_CUH
#define FA_COMMON_HOPPER_BWD_RING_CUH

// The backward's mbarriers at `base` (8 bytes each): kv_full, then full[kStages], empty[kStages].
template <int kStages>
struct FaBwdBars {
  unsigned base;
  FA_DEVICE unsigned kv_full() const { return base; }
  FA_DEVICE unsigned full(int s) const { return base + 8u * (1 + s); }
  FA_DEVICE unsigned empty(int s) const { return base + 8u * (1 + kStages + s); }
  // One thread: kv_full takes lane 0's arrival, full the producer warp's 33, empty `releases` (one per consumer warp).
  FA_DEVICE void init(unsigned releases) const {
    fa_mbar_init(kv_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      fa_mbar_init(full(s), 33);  // lane 0's expect_tx arrival + the producer warp's 32 after LSE / Delta
      fa_mbar_init(empty(s), releases);
    }
    fa_mbar_init_fence();
  }
};

// The backward's shared memory (shared-window addresses): K, V, the Q / dO ring, the two dS^T buffers, LSE / Delta
// per slot.
struct FaBwdSmem {
  unsigned k, v, q, dout, ds, lse, delta;
};

// The producer warp of the backward (warp 0 of warpgroup 0, after setmaxnreg.dec): run() loads every tile's slot.
template <class K>
struct FaBwdProducer {
  const FaBwdArgs& args;
  const FaBwdTma& tma;
  const FaBwdSched<K>& sch;
  FaBwdBars<K::kStages> bar;
  FaBwdSmem sm;
  int lane;
  FaRingPos<K::kStages> pos;  // the ring slot and phase, advanced per tile

  // K and V of the CTA's key block (lane 0, before the first tile).
  FA_DEVICE void load_kv() const {
    fa_tma_prefetch(&tma.q);
    fa_tma_prefetch(&tma.dout);
    fa_mbar_arrive_expect_tx(bar.kv_full(), (unsigned)(2 * K::kKVBytes));
#pragma unroll
    for (int c = 0; c < K::kD / 64; ++c) {
      fa_tma_load_4d(sm.k + (unsigned)(c * K::kBN * 128), &tma.k, bar.kv_full(), c * 64, sch.n0, sch.g, sch.b);
      fa_tma_load_4d(sm.v + (unsigned)(c * K::kBN * 128), &tma.v, bar.kv_full(), c * 64, sch.n0, sch.g, sch.b);
    }
  }
  // Tile (h, m) into the next slot: Q and dO by TMA (lane 0), LSE (base 2) and Delta by the warp's lanes.
  FA_DEVICE void load_tile(int h, int m) {
    const FaFwdArgs& a = args.f;
    const float pos_inf = __int_as_float(0x7f800000);
    const int i0 = m * K::kBM, st = pos.stage, b = sch.b;
    fa_mbar_wait(bar.empty(st), pos.phase ^ 1u);
    if (lane == 0) {
      fa_mbar_arrive_expect_tx(bar.full(st), (unsigned)(2 * K::kQBytes));
#pragma unroll
      for (int c = 0; c < K::kD / 64; ++c) {
        fa_tma_load_4d(sm.q + (unsigned)(st * K::kQBytes + c * K::kBM * 128), &tma.q, bar.full(st), c * 64, i0, h, b);
        fa_tma_load_4d(sm.dout + (unsigned)(st * K::kQBytes + c * K::kBM * 128), &tma.dout, bar.full(st), c * 64, i0, h,
                       b);
      }
    }
    const long long lrow = (long long)b * a.lse_sb + (long long)h * a.lse_sh;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int r = lane + 32 * k, i = i0 + r;
      float l2 = pos_inf, dl = 0.f;
      if (i < a.seqlen_q) {
        const float l = a.lse[lrow + i];
        l2 = l == -pos_inf ? pos_inf : l * 1.4426950408889634f;
        dl = args.delta[lrow + i];
      }
      fa_st_shared_f32(sm.lse + (unsigned)((st * K::kBM + r) * 4), l2);
      fa_st_shared_f32(sm.delta + (unsigned)((st * K::kBM + r) * 4), dl);
    }
    fa_mbar_arrive(bar.full(st));
    pos.advance();
  }
  // Every tile of the CTA's walk (K and V first).
  FA_DEVICE void run() {
    sch.for_each([&](int it, int h, int m, bool) {
      if (it == 0 && lane == 0) load_kv();  // none without tiles
      load_tile(h, m);
    });
  }
};

#endif  // FA_COMMON_HOPPER_BWD_RING_CUH
