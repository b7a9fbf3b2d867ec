// common/hopper_bwd_epilogue.cuh -- what a Hopper backward consumer writes to global memory: its part of each tile's
// dQ' into the float32 accumulator, and its dK / dV rows at the end.
// dQ': the accumulator fragment of a wgmma m64nNk16 (N = K::kDqN columns from col0 of the head; rows i0 + 16 warp +
// lane / 4 (+8)) is added into args.dq_accum with red.add.v2 (8 x 8 tiled, common/dq_accum.cuh: G floats per 8-row
// group; rows past seqlen_q skipped). bwd_pre zeroes dq_accum, bwd_post writes dq = scale * dQ'.
// dK / dV: the consumer's 64 key rows (rbase of FaWgThread from the CTA's first key; rows past seqlen_k skipped) of
// dK = scale * dK and dV (fp32 accumulators of K::kD columns) in the dtype, 4-byte stores.
// K (the kernel's constexpr config) provides: kD, kDqN. Needs common/sm80.cuh (pack2, red_add2),
// common/hopper_softmax.cuh (FaWgThread), common/hopper_bwd_sched.cuh, fa_args.cuh.
#ifndef FA_COMMON_HOPPER_BWD_EPILOGUE_CUH
#define FA_COMMON_HOPPER_BWD_EPILOGUE_CUH

template <class K>
struct FaBwdEpilogue {
  const FaBwdArgs& args;
  FaWgThread th;
  long long G;  // floats per 8-row group of dq_accum
  int col0;     // the first head-dim column of this consumer's dQ'

  // dQ' of query block i0, head h, batch b (sq: seqlen_q) into dq_accum.
  FA_DEVICE void add_dq(const float (&dq)[K::kDqN / 2], int b, int h, int i0, int sq) const {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = th.warp * 16 + th.gq + 8 * hh;
      if (i0 + r < sq) {
        const long long R = (long long)b * sq + i0 + r;
        float* p = args.dq_accum + (R >> 3) * G + ((R & 7) << 3) + (((long long)h * K::kD + col0) << 3) + 2 * th.tq;
#pragma unroll
        for (int j = 0; j < K::kDqN / 8; ++j) fa_sm80::red_add2(p + j * 64, dq[4 * j + 2 * hh], dq[4 * j + 2 * hh + 1]);
      }
    }
  }
  // dK = scale * dK and dV of the key block from n0 (kv head g, batch b; sk: seqlen_k) in the dtype.
  FA_DEVICE void store(const float (&dk)[K::kD / 2], const float (&dv)[K::kD / 2], int n0, int g, int b, int sk) const {
    typedef unsigned short E;
    const float scale = args.f.scale;
    E* dkg = (E*)args.dk + (long long)b * args.dk_sb + (long long)g * args.dk_sh;
    E* dvg = (E*)args.dv + (long long)b * args.dv_sb + (long long)g * args.dv_sh;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int kj = n0 + th.rbase + 8 * hh;
      if (kj < sk) {
#pragma unroll
        for (int j = 0; j < K::kD / 8; ++j) {
          const int col = 8 * j + 2 * th.tq;
          *(unsigned*)(dkg + (long long)kj * args.dk_ss + col) =
              fa_sm80::pack2(dk[4 * j + 2 * hh] * scale, dk[4 * j + 2 * hh + 1] * scale);
          *(unsigned*)(dvg + (long long)kj * args.dv_ss + col) =
              fa_sm80::pack2(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]);
        }
      }
    }
  }
};

#endif  // FA_COMMON_HOPPER_BWD_EPILOGUE_CUH
