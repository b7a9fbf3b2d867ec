// common/hopper_kv_ring.cuh -- the TMA producer ring of a warp-specialized Hopper kernel: ring positions (stage and
// phase parity), the forward's mbarriers (Q buffers, K and V stages) and the producer warp's loop over the tiles.
// A ring of kStages shared-memory slots has per slot a full mbarrier (the producer's arrival with the transaction
// bytes its copies bring) and an empty one (one arrival per consumer warp). Producer and consumers each walk the ring
// with an FaRingPos: the producer waits for "empty" at parity phase ^ 1 (a fresh barrier counts as released once), a
// consumer for "full" at parity phase; the position advances per use and flips the phase on wrapping.
// The forward's producer (FaWgProducer, one warp): per tile, Q (kQBuf buffers, K::kPersist: double-buffered when it
// fits; the buffer waits for its release by every consumer warp) then the K/V blocks of the tile's visits, K of block
// j+1 issued before V of block j (the consumers need K_{j+1} for S = Q K^T before V_j). With block skipping
// (K::kSparse) the whole warp walks mask_blocks' classes (common/blk_visit.cuh, the same walk as the consumers') and
// lane 0 issues; a partial block's sub-tile record (lane l <= kC: word l) and a bulk copy of its slot of hidden pairs
// are staged in the block's K stage, on K's full barrier, whose arrival comes last. Non-persistent kSparse
// (K::kEarlyQ): Q goes out before the class walk, whose round trip runs under Q's copy.
// Every tile row is 128 bytes wide (one swizzle atom: K::kAtom elements, 64 16-bit or 128 fp8), one TMA box per atom.
// K (the kernel's constexpr config) provides: kStages, kC, kBM, kBN, kAtom, kDp, kDVp (Q/K and V columns in shared
// memory: multiples of kAtom), kR0, kQBytes, kKBytes, kVBytes, kBitsBytes, kRecBytes, kQBuf, kPersist, kSparse,
// kEarlyQ (and what FaTileSched reads). Needs common/sm90.cuh,
// common/blk_visit.cuh, common/hopper_tile_sched.cuh, fa_tma_args.cuh.
#ifndef FA_COMMON_HOPPER_KV_RING_CUH
#define FA_COMMON_HOPPER_KV_RING_CUH

// A position in a ring of kStages slots: the slot and the phase parity of its current round.
template <int kStages>
struct FaRingPos {
  int stage;
  unsigned phase;
  FA_DEVICE void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// The forward's mbarriers at `base` (8 bytes each): q_full[2] (Q buffer landed), q_empty[2] (Q buffer free again:
// persistent), then k_full, v_full, k_empty, v_empty [kStages] each.
template <int kStages>
struct FaWgBars {
  unsigned base;
  FA_DEVICE unsigned q_full(int i) const { return base + 8u * i; }
  FA_DEVICE unsigned q_empty(int i) const { return base + 8u * (2 + i); }
  FA_DEVICE unsigned k_full(int s) const { return base + 8u * (4 + s); }
  FA_DEVICE unsigned v_full(int s) const { return base + 8u * (4 + kStages + s); }
  FA_DEVICE unsigned k_empty(int s) const { return base + 8u * (4 + 2 * kStages + s); }
  FA_DEVICE unsigned v_empty(int s) const { return base + 8u * (4 + 3 * kStages + s); }
  // One thread: full barriers take the producer's arrival, empty ones `releases` (one per consumer warp), V's empty
  // ones `v_releases` (the fp8 forward: its transposer warps, common/hopper_v_transpose.cuh).
  FA_DEVICE void init(unsigned releases) const { init(releases, releases); }
  FA_DEVICE void init(unsigned releases, unsigned v_releases) const {
    for (int i = 0; i < 2; ++i) {
      fa_mbar_init(q_full(i), 1);
      fa_mbar_init(q_empty(i), releases);
    }
    for (int s = 0; s < kStages; ++s) {
      fa_mbar_init(k_full(s), 1);
      fa_mbar_init(v_full(s), 1);
      fa_mbar_init(k_empty(s), releases);
      fa_mbar_init(v_empty(s), v_releases);
    }
    fa_mbar_init_fence();
  }
};

// The forward's shared memory (shared-window addresses): Q buffers, K / V stages, kSparse's staged slots of hidden
// pairs and sub-tile records.
struct FaWgSmem {
  unsigned q, k, v, bits, rec;
};

// The producer warp of the forward (warp 0 of warpgroup 0, after setmaxnreg.dec): run() issues every TMA copy.
template <class K>
struct FaWgProducer {
  const FaFwdArgs& args;
  const FaFwdTma& tma;
  const FaTileSched<K>& sch;
  FaWgBars<K::kStages> bar;
  FaWgSmem sm;
  int tid;
  bool lead;                   // the lane that issues (thread 0)
  FaRingPos<K::kStages> k, v;  // K / V ring positions, continued across tiles

  // Q of tile T into buffer qb.
  FA_DEVICE void load_q(const FaTile& T, int qb) const {
    fa_mbar_arrive_expect_tx(bar.q_full(qb), (unsigned)K::kQBytes);
#pragma unroll
    for (int c = 0; c < K::kDp / K::kAtom; ++c)
      fa_tma_load_4d(sm.q + (unsigned)(qb * K::kR0 + c * K::kBM * 128), &tma.q, bar.q_full(qb), c * K::kAtom,
                     T.base_q + T.m0, T.h, T.bt);
  }
  // K of the visit `entry` ((n_block << 1) | full) into the next K stage. K's copy goes out first; a partial block's
  // record (recw: lane l <= kC word l, whose load may still be in flight) and slot follow (kSparse), and the arrival
  // comes last, after the record's stores, so the phase waits for all of them.
  FA_DEVICE void load_k(const FaTile& T, int entry, unsigned recw) {
    const int kn = T.base_k + (entry >> 1) * K::kBN;
    const int ks = k.stage;
    fa_mbar_wait(bar.k_empty(ks), k.phase ^ 1u);
    const bool staged = K::kSparse && (entry & 1) == 0;
    if (lead) {
      if (staged) fa_mbar_expect_tx(bar.k_full(ks), (unsigned)K::kKBytes);
      else fa_mbar_arrive_expect_tx(bar.k_full(ks), (unsigned)K::kKBytes);
#pragma unroll
      for (int c = 0; c < K::kDp / K::kAtom; ++c)
        fa_tma_load_4d(sm.k + (unsigned)(ks * K::kKBytes + c * K::kBN * 128), &tma.k, bar.k_full(ks), c * K::kAtom, kn,
                       T.g, T.bt);
    }
    if constexpr (K::kSparse) {
      if (staged) {
        const unsigned slot = __shfl_sync(0xffffffffu, recw, K::kC);
        if (tid <= K::kC) fa_st_shared_b32(sm.rec + (unsigned)(ks * K::kRecBytes + 4 * tid), recw);
        __syncwarp();
        if (lead) {
          if (slot != 0xffffffffu) {
            fa_mbar_expect_tx(bar.k_full(ks), (unsigned)K::kBitsBytes);
            fa_bulk_load(sm.bits + (unsigned)(ks * K::kBitsBytes), args.blk_bits + 64 + (size_t)slot * (K::kBM * 8),
                         (unsigned)K::kBitsBytes, bar.k_full(ks));
          }
          fa_mbar_arrive(bar.k_full(ks));
        }
      }
    }
    k.advance();
  }
  // V of key block nb into the next V stage.
  FA_DEVICE void load_v(const FaTile& T, int nb) {
    const int kn = T.base_k + nb * K::kBN;
    const int vs = v.stage;
    fa_mbar_wait(bar.v_empty(vs), v.phase ^ 1u);
    if (lead) {
      fa_mbar_arrive_expect_tx(bar.v_full(vs), (unsigned)K::kVBytes);
#pragma unroll
      for (int c = 0; c < K::kDVp / K::kAtom; ++c)
        fa_tma_load_4d(sm.v + (unsigned)(vs * K::kVBytes + c * K::kBN * 128), &tma.v, bar.v_full(vs), c * K::kAtom, kn,
                       T.g, T.bt);
    }
    v.advance();
  }
  // The entry (n_block << 1) | full of visit it: the band from its last block down, or the next classified one
  // (kSparse; a partial block's record words go to recw, lane l <= kC word l: its codes and slot, defaults without
  // records); -1 past the last visit.
  FA_DEVICE int block_of(const FaTile& T, FaBlkCursor& cur, int it, unsigned& recw) const {
    if constexpr (K::kSparse) {
      const int entry = cur.next();
      if (entry >= 0 && (entry & 1) == 0) {
        const unsigned* w = sch.sub_words(T.cls, entry >> 1);
        recw = tid < K::kC ? 0x55555555u : 0xffffffffu;
        if (w != nullptr && tid <= K::kC && (tid < K::kC || args.blk_bits != nullptr)) recw = w[tid];
      }
      return entry;
    }
    return it < T.n_blocks ? (T.nb_hi - 1 - it) << 1 : -1;
  }

  // Every tile of this CTA: Q, then K / V of its visits.
  FA_DEVICE void run() {
    if (lead) {
      fa_tma_prefetch(&tma.q);
      fa_tma_prefetch(&tma.k);
      fa_tma_prefetch(&tma.v);
    }
    int qn = 0;  // tiles whose Q was loaded: buffer qn % kQBuf, phase (qn / kQBuf) & 1
    for (int t = sch.t_first; t < sch.total; t += sch.t_step) {
      FaTile T = sch.at(t);
      // Non-persistent kSparse: Q goes out before the class walk (the walk's round trip runs under Q's copy; a tile
      // the classes leave empty still gets its Q, which the consumers wait for before staging O there).
      if constexpr (!K::kEarlyQ) sch.count_visits(T);
      if (T.n_blocks == 0) continue;
      const int qb = qn % K::kQBuf;
      const unsigned qph = (unsigned)(qn / K::kQBuf) & 1u;
      ++qn;
      if constexpr (K::kPersist) fa_mbar_wait(bar.q_empty(qb), qph ^ 1u);  // every consumer warp is done with it
      if (lead) load_q(T, qb);
      unsigned recw = 0u;
      FaBlkCursor cur;
      if constexpr (K::kSparse) cur.start(T.cls, T.nb_lo, T.last + 1);
      int e = block_of(T, cur, 0, recw);
      if (e < 0) continue;
      load_k(T, e, recw);
      for (int it = 1; e >= 0; ++it) {
        const int e_next = block_of(T, cur, it, recw);
        if (e_next >= 0) load_k(T, e_next, recw);
        load_v(T, e >> 1);
        e = e_next;
      }
    }
  }
};

#endif  // FA_COMMON_HOPPER_KV_RING_CUH
