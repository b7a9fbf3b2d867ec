// common/hopper_epilogue.cuh -- a Hopper forward consumer's epilogue: O /= l and LSE, then O to global memory.
// O is staged in the warpgroup's rows of its tile's Q buffer (swizzled like Q: a 64-column chunk of 64 rows is the
// TMA box of the O map) and written by one TMA store per 64 columns from thread 0 (fixed length: the map clips rows
// past seqlen_q and columns past head_dim_v), or with 16-byte stores (varlen: a box would run into the next
// sequence's rows). Persistent with a TMA store: warps 1-3 release the Q buffer as the store is issued, warp 0 once
// the store has read it (flush: after this consumer's next GEMM is issued, the store reading under it, else at the
// next epilogue or the end). Single-buffered persistent (the Q buffer is being refilled) and tiles without visits
// (they own no Q buffer): O goes straight from the accumulators with 4-byte stores. Rows past seqlen_q are never
// written; lse (kHasLse, args.lse set) by the quad's first lane of each row. With attention sinks (kHasSinks) the
// row's sink column joins O's factor and the LSE here (common/sinks.cuh).
// K (the kernel's constexpr config) provides: kBM, kBN, kStages, kDV, kOVp (O's columns staged: head_dim_v padded to
// 64, 16-bit), kNV, kPersist, kStaged. O has fa_cfg::kODtype (fa_sm80::pack2). Reads fa_cfg:
// kVarlen, kHasLse, kHasSinks. Needs common/sm90.cuh, common/sm80.cuh (pack2), common/hopper_kv_ring.cuh (FaWgBars),
// common/hopper_softmax.cuh, fa_tma_args.cuh.
#ifndef FA_COMMON_HOPPER_EPILOGUE_CUH
#define FA_COMMON_HOPPER_EPILOGUE_CUH

template <class K>
struct FaWgEpilogue {
  const FaFwdArgs& args;
  const FaFwdTma& tma;
  FaWgBars<K::kStages> bar;
  FaWgThread th;
  int pending;  // TMA-stored O: the Q buffer whose release by warp 0 waits until the store has read it (-1: none)

  FA_DEVICE void release(unsigned b) const {  // one arrival per warp
    if (th.lane == 0) fa_mbar_arrive(b);
  }
  // The pending store's reads waited for and its buffer released by warp 0 (persistent, TMA-stored O).
  FA_DEVICE void flush() {
    if constexpr (K::kPersist && K::kStaged) {
      if (pending >= 0) {
        if (th.ltid == 0) {
          fa_tma_store_wait_read();
          fa_mbar_arrive(bar.q_empty(pending));
        }
        pending = -1;
      }
    }
  }

  // O /= l and LSE of tile T; O (the accumulators o) to global memory, staged in Q buffer qb at sQt where it is.
  FA_DEVICE void store(const FaTile& T, const float (&o)[K::kNV / 2], const FaWgSoftmax<K::kBN>& sm, float mul,
                       unsigned sQt, int qb) {
    typedef unsigned short E;
    const int m0 = T.m0, sq = T.sq, h = T.h, b = T.b;
    const int rbase = th.rbase, tq = th.tq;
    flush();  // a tile without GEMMs: the store before it is read before this one is staged
    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float l = sm.row_sum(hh);
      inv[hh] = l > 0.f ? 1.f / l : 0.f;
      [[maybe_unused]] float lse_sink = 0.f;
      if constexpr (fa_cfg::kHasSinks) {  // the sink column (common/sinks.cuh)
        const float mx = sm.row_m[hh];
        const FaRowEnd e = fa_sink_row_end(mx == FA_WG_NEG_INF ? FA_WG_NEG_INF : mx * mul, l, args.sinks[h]);
        inv[hh] = e.o_mul;
        lse_sink = e.lse;
      }
      const int r = rbase + hh * 8;
      if constexpr (fa_cfg::kHasLse) {
        if (args.lse != nullptr && tq == 0 && m0 + r < sq)
          args.lse[(long long)b * args.lse_sb + (long long)h * args.lse_sh + (long long)(T.base_q + m0 + r)] =
              fa_cfg::kHasSinks ? lse_sink : sm.lse(hh, l, mul);
      }
    }
    E* og = (E*)args.o + (fa_cfg::kVarlen ? 0ll : (long long)b * args.o_sb) + (long long)T.base_q * args.o_ss +
            (long long)h * args.o_sh;
    if (!K::kStaged || (K::kPersist && T.n_blocks == 0)) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = rbase + hh * 8;
        if (m0 + r < sq) {
          unsigned* orow = (unsigned*)(og + (long long)(m0 + r) * args.o_ss + tq * 2);
#pragma unroll
          for (int jt = 0; jt < K::kNV / 8; ++jt)
            if (jt * 8 < K::kDV)
              orow[jt * 4] = fa_sm80::pack2(o[jt * 4 + hh * 2] * inv[hh], o[jt * 4 + hh * 2 + 1] * inv[hh]);
        }
      }
    } else {
      stage(o, inv, sQt);
      if constexpr (!fa_cfg::kVarlen) store_tma(T, sQt, qb);
      else store_rows(og, m0, sq, sQt, qb);
    }
  }

  // This warpgroup's rows of O / l into the Q buffer at sQt (the TMA store's swizzled box layout).
  FA_DEVICE void stage(const float (&o)[K::kNV / 2], const float (&inv)[2], unsigned sQt) const {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = th.rbase + hh * 8;
      const unsigned rowaddr = sQt + (unsigned)(r * 128);
#pragma unroll
      for (int jt = 0; jt < K::kNV / 8; ++jt) {
        if (jt * 8 < K::kDV) {
          const unsigned addr =
              rowaddr + (unsigned)((jt >> 3) * K::kBM * 128) + (unsigned)((((jt & 7) ^ (r & 7)) << 4) + th.tq * 4);
          fa_st_shared_b32(addr, fa_sm80::pack2(o[jt * 4 + hh * 2] * inv[hh], o[jt * 4 + hh * 2 + 1] * inv[hh]));
        }
      }
    }
  }
  // Fixed length: one TMA store per 64 columns from thread 0 (the staged rows fenced to the async proxy first).
  FA_DEVICE void store_tma(const FaTile& T, unsigned sQt, int qb) {
    fa_fence_proxy_async();  // the staged rows feed the TMA store (async proxy)
    fa_bar_sync(1 + th.cw, 128);
    if (th.ltid == 0) {
#pragma unroll
      for (int c = 0; c < K::kOVp / 64; ++c)
        fa_tma_store_4d(&tma.o, sQt + (unsigned)(c * K::kBM * 128 + th.cw * 64 * 128), c * 64, T.m0 + th.cw * 64, T.h,
                        T.bt);
      fa_tma_store_commit();
      if constexpr (!K::kPersist) fa_tma_store_wait_read();  // the CTA's shared memory outlives the reads
    }
    if constexpr (K::kPersist) {  // warps 1-3 release the buffer now, warp 0 once the store has read it
      if (th.warp == 0) pending = qb;
      else release(bar.q_empty(qb));
    }
  }
  // Varlen: 16-byte stores of the staged rows (rows past the sequence skipped).
  FA_DEVICE void store_rows(unsigned short* og, int m0, int sq, unsigned sQt, int qb) const {
    fa_bar_sync(1 + th.cw, 128);
    constexpr int kCh = K::kDV / 8;  // 16-byte chunks per row
#pragma unroll
    for (int it = 0; it < (64 * kCh + 127) / 128; ++it) {
      const int idx = th.ltid + it * 128;
      if ((64 * kCh) % 128 == 0 || idx < 64 * kCh) {
        const int r = th.cw * 64 + idx / kCh, ch = idx % kCh;
        if (m0 + r < sq) {
          const uint4 v =
              fa_ld_shared_v4(sQt + (unsigned)((ch >> 3) * K::kBM * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4)));
          *(uint4*)(og + (long long)(m0 + r) * args.o_ss + ch * 8) = v;
        }
      }
    }
    if constexpr (K::kPersist) {  // double-buffered: the buffer is free once this warp has read its O rows
      fa_fence_proxy_async();
      __syncwarp();
      release(bar.q_empty(qb));
    }
  }
};

#endif  // FA_COMMON_HOPPER_EPILOGUE_CUH
