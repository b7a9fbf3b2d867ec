// common/hopper_tile_sched.cuh -- the work tiles of a Hopper forward (fwd_wgmma) and the order a CTA takes them in:
// one scheduler type for the plain grid, the persistent round robin and the persistent pairs of tiles.
// A work tile is (query block of K::kBM rows, query head, batch) with its sequence geometry and the band of K/V blocks
// (of K::kBN keys) its rows see. Orders (K::kPersist, K::kMasked, K::kHeadOrder):
//   plain:       one tile per CTA, the CTA's own coordinates (query blocks reversed for masked problems: the
//                longest first);
//   persistent:  grid = min(tiles, SMs) CTAs take t = blockIdx.x, + gridDim.x, ..; unmasked t = (b * heads_q + h) *
//                mblocks + x (a head's query blocks side by side, sharing its K/V in L2); masked t = x * heads_q *
//                batch + b * heads_q + h, x reversed (every CTA's stride meets every length alike), the odd waves of
//                gridDim.x tiles in reverse (a CTA that drew a longer tile of one wave draws a shorter of the next);
//   pairs (K::kHeadOrder, masked): a unit is two tiles whose bands add up to one length, query blocks x and
//                mblocks - 1 - x of one (batch, head) (odd mblocks: also the middle blocks of two (batch, head)s),
//                units in (batch, head)-major order; CTA c runs unit c + i * gridDim.x as its tiles 2i and 2i + 1.
//                Every unit costs the same, so the CTAs stay in step, and a wave holds every query block of about
//                2 gridDim.x / mblocks (batch, head)s (their K / V stay in L2).
// Band (bottom-right aligned masks, fa_cfg::kMask): the K/V blocks [nb_lo, nb_hi) that the tile's rows see, visited
// from the last down; with block skipping (K::kSparse) the tile also carries its row of mask_blocks' classes and,
// after count_visits (warp-collective), the count of its visited blocks and the last of them.
// K (the kernel's constexpr config) provides: kBM, kBN, kC (consumer warpgroups), kPersist, kMasked, kHeadOrder,
// kSparse. Reads fa_cfg: kVarlen, kMask. Needs common/blk_visit.cuh.
#ifndef FA_COMMON_HOPPER_TILE_SCHED_CUH
#define FA_COMMON_HOPPER_TILE_SCHED_CUH

// Geometry of one work tile (query block, head, batch).
struct FaTile {
  int m0, mb, h, b, g, bt;  // first query row, query block, query head, batch, kv head, TMA batch coordinate
  int sq, sk, base_q, base_k;
  int diag0, nb_lo, nb_hi, n_blocks;  // diagonal offset of row m0, the band's K/V blocks [nb_lo, nb_hi), visited
  const unsigned char* cls;  // kSparse: the query block's row of block classes (null: none, every block masked)
  int last;                  // kSparse: the last visited block (the cursor's start)
};

// The tiles of a launch and a CTA's walk over them: for (t = t_first; t < total; t += t_step) at(t).
template <class K>
struct FaTileSched {
  const FaFwdArgs& args;
  int mblocks, heads_batch_all, pair_units, total, t_first, t_step;

  FA_DEVICE explicit FaTileSched(const FaFwdArgs& a) : args(a) {
    mblocks = (args.seqlen_q + K::kBM - 1) / K::kBM;
    // kHeadOrder: units of two tiles of one cost, round robin (pair_units, at)
    heads_batch_all = args.heads_q * args.batch;
    pair_units = (mblocks & 1) ? mblocks * ((heads_batch_all + 1) / 2) : (mblocks / 2) * heads_batch_all;
    total = !K::kPersist                    ? 1
            : (K::kMasked && K::kHeadOrder) ? 2 * (int)gridDim.x * ((pair_units + (int)gridDim.x - 1) / (int)gridDim.x)
                                            : mblocks * heads_batch_all;
    t_first = K::kPersist ? (int)blockIdx.x : 0;
    t_step = K::kPersist ? (int)gridDim.x : 1;
  }

  // Persistent pairs: the (query block, batch * heads_q + head) of tile t (query block -1: past the last unit).
  FA_DEVICE void pair_tile(int t, int* xb_out, int* hb_out) const {
    const int k = t / t_step, half = k & 1;
    const int u = t - k * t_step + (k >> 1) * t_step;  // the unit
    int xb = -1;  // none: past the last unit (m_block = mblocks, a tile past the sequence)
    int hb = 0;
    if ((mblocks & 1) == 0) {
      const int per = mblocks / 2, j = u % per;
      hb = u / per;
      xb = half ? mblocks - 1 - j : j;
    } else {
      const int pf = (mblocks - 1) / 2, g = u / mblocks, r = u - g * mblocks;
      if (r < 2 * pf) {
        hb = 2 * g + r / pf;
        xb = half ? mblocks - 1 - r % pf : r % pf;
      } else {  // the middle query blocks of (batch, head)s 2g and 2g + 1
        hb = 2 * g + half;
        xb = pf;
      }
    }
    if (u >= pair_units || hb >= heads_batch_all) {
      xb = -1;
      hb = 0;
    }
    *xb_out = xb;
    *hb_out = hb;
  }

  // Work tile t with its geometry and band; n_blocks is the band's block count (kSparse: count_visits then counts
  // the visited ones).
  FA_DEVICE FaTile at(int t) const {
    FaTile T;
    int xb, h, b;
    if constexpr (K::kPersist) {
      int hb;
      if constexpr (K::kMasked && K::kHeadOrder) {
        pair_tile(t, &xb, &hb);
      } else if constexpr (K::kMasked) {
        const int heads_batch = args.heads_q * args.batch;
        const int w = t / t_step;
        if ((w & 1) && (w + 1) * t_step <= total) t = w * t_step + (t_step - 1 - (t - w * t_step));
        xb = t / heads_batch;
        hb = t - xb * heads_batch;
      } else {
        xb = t % mblocks;
        hb = t / mblocks;
      }
      h = hb % args.heads_q;
      b = hb / args.heads_q;
    } else {
      xb = (int)blockIdx.x;
      h = (int)blockIdx.y;
      b = (int)blockIdx.z;
    }
    const int m_block = K::kMasked ? mblocks - 1 - xb : xb;
    T.h = h;
    T.b = b;
    T.mb = m_block;
    T.m0 = m_block * K::kBM;
    if constexpr (fa_cfg::kVarlen) {
      const int q0 = args.cu_seqlens_q[b], k0 = args.cu_seqlens_k[b];
      T.sq = args.cu_seqlens_q[b + 1] - q0;
      T.sk = args.cu_seqlens_k[b + 1] - k0;
      T.base_q = q0;
      T.base_k = k0;
    } else {
      T.sq = args.seqlen_q;
      T.sk = args.seqlen_k;
      T.base_q = 0;
      T.base_k = 0;
    }
    T.g = h / args.group;
    T.bt = fa_cfg::kVarlen ? 0 : b;  // TMA batch coordinate (varlen: packed tokens, batch dim of size 1)
    // key range of the whole block; K/V blocks outside it are never loaded
    T.diag0 = T.m0 + T.sk - T.sq;
    const int last_row = min(T.m0 + K::kBM, T.sq) - 1;
    int key_lo = 0, key_hi = T.sk;
    if constexpr (fa_cfg::kMask != 0) {
      if (args.win_left >= 0) key_lo = max(0, T.diag0 - args.win_left);
      if (args.win_right >= 0) key_hi = min(T.sk, last_row + T.sk - T.sq + args.win_right + 1);
    }
    T.nb_lo = key_lo / K::kBN;
    T.nb_hi = key_hi > key_lo ? (key_hi + K::kBN - 1) / K::kBN : T.nb_lo;
    T.n_blocks = T.m0 < T.sq ? T.nb_hi - T.nb_lo : 0;
    T.cls = nullptr;
    T.last = T.nb_hi - 1;
    if constexpr (K::kSparse) {
      if (args.blk_cls != nullptr)
        T.cls = args.blk_cls + (long long)b * args.blk_cls_sb + (long long)h * args.blk_cls_sh +
                (long long)m_block * args.blk_nkb;
    }
    return T;
  }

  // kSparse: the visited blocks of the band and the last of them (common/blk_visit.cuh; warp-collective, the same in
  // every warp).
  FA_DEVICE void count_visits(FaTile& T) const {
    if constexpr (K::kSparse) {
      if (T.n_blocks > 0) {
        const FaBlkSpan sp = fa_blk_span(T.cls, T.nb_lo, T.nb_hi);
        T.n_blocks = sp.count;
        T.last = sp.last;
      }
    }
  }

  // kSparse: the sub-tile record (mask_blocks; fa_args.cuh: K::kC code words, then the slot) of block nb of the class
  // row cls_row (the tile index from the class pointer), or null without records.
  FA_DEVICE const unsigned* sub_words(const unsigned char* cls_row, int nb) const {
    if (!K::kSparse || cls_row == nullptr || args.blk_sub == nullptr) return nullptr;
    return args.blk_sub + ((long long)(cls_row - args.blk_cls) + nb) * (K::kC + 1);
  }
};

#endif  // FA_COMMON_HOPPER_TILE_SCHED_CUH
