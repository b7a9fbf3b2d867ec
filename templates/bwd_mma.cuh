// bwd_mma.cuh -- the tensor-core backward (FlashAttention-2 backward, seed 003 step 2), fp16/bf16, sm_80+.
//
// One CTA per (key block n = blockIdx.x of kBlockN keys, kv head g = blockIdx.y, batch b = blockIdx.z). K_n, V_n
// stay in shared memory; the CTA loops over the query heads h of g's GQA group and, for each, over the query
// blocks m (kBlockM rows) whose tile meets the mask band, with Q_m, dO_m, LSE_m, Delta_m (bwd_pre) in shared memory
// (double-buffered with cp.async when kStages == 2). Per tile, with scores recomputed from the LSE:
//   S^T = K_n Q_m^T,  dP^T = V_n dO_m^T                                  (GEMM 1; warps split keys x queries)
//   s = scale*S -> softcap c*tanh(s/c) (t) -> + bias - slope|i+Sk-Sq-j|;  P = exp(s - lse_i) (0 where hidden)
//   dS' = P (dP - Delta_i) (1 - t^2)                                      (P^T, dS'^T stored to shared memory)
//   dV_n += P^T dO_m,  dK_n += dS'^T Q_m                                  (GEMM 2; float32 registers, warps split
//                                                                          keys x head columns)
//   dQ'_m += dS' K_n   -> float32 red.add into args.dq_accum              (GEMM 3; warps split queries x columns)
// At the end dK = scale * dK_n and dV_n are written in the dtype (GQA summed in-CTA: no float32 dK/dV buffers);
// bwd_post writes dq = scale * dQ'. Fully masked rows (lse = -inf) and out-of-range rows/keys give P = 0.
// args.deterministic: the dQ' additions of one (b, h, m) happen in key-block order, ordered by an int32 semaphore
// per (token row of block m, h) in args.dk_accum (zeroed by bwd_pre): CTA n waits until it reads n - n_lo(m).
// mma.sync m16n8k16 (float32 accumulate), ldmatrix (.trans for the transposed operands), rows padded by 16 bytes
// in shared memory; head dims that are not multiples of 16 are zero-padded in the reduction.
// Reads from the prelude: kDtype, kArch, kHeadDim, kHeadDimV, kMask (via args window), kHasBias, kHasAlibi,
// kHasSoftcap, kBlockM, kBlockN, kWarps, kStages.
#ifndef FA_BWD_MMA_CUH
#define FA_BWD_MMA_CUH

namespace fa_bwd_mma {
typedef unsigned short T;
constexpr int BM = fa_cfg::kBlockM, BN = fa_cfg::kBlockN, W = fa_cfg::kWarps, NS = fa_cfg::kStages;
constexpr int D = fa_cfg::kHeadDim, DV = fa_cfg::kHeadDimV;
constexpr int DP = (D + 15) / 16 * 16, DVP = (DV + 15) / 16 * 16;  // reduction dims padded to 16
constexpr int PK = DP + 8, PV = DVP + 8, PS = BM + 8;            // shared row pitches (elements)
constexpr int cmin(int x, int y) { return x < y ? x : y; }
// GEMM 1 / 2: warps split the key block (16-row strips) and then queries (GEMM 1) or head columns (GEMM 2).
constexpr int WK = cmin(W, BN / 16), WQ1 = W / WK, MT1 = BN / 16 / WK, NT1 = BM / WQ1 / 8;
constexpr int WD2 = W / WK, NTK = (D / 8 + WD2 - 1) / WD2, NTV = (DV / 8 + WD2 - 1) / WD2;
// GEMM 3: warps split the query block and then head columns.
constexpr int WQ3 = cmin(W, BM / 16), WD3 = W / WQ3, MT3 = BM / 16 / WQ3, NT3 = (D / 8 + WD3 - 1) / WD3;
static_assert(BN % 16 == 0 && BM % 16 == 0 && W % WK == 0 && W % WQ3 == 0, "bwd_mma tiling");
static_assert(NT1 % 2 == 0 && NT1 * 8 * WQ1 == BM, "bwd_mma GEMM1 query split");
// Shared memory (16-bit elements, then floats).
constexpr int kOffV = BN * PK, kOffQ = kOffV + BN * PV, kOffDo = kOffQ + NS * BM * PK, kOffP = kOffDo + NS * BM * PV;
constexpr int kOffDs = kOffP + BN * PS, kEndHalf = kOffDs + BN * PS;
constexpr float kLog2e = 1.4426950408889634f;

FA_DEVICE unsigned smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
FA_DEVICE void cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
FA_DEVICE void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
FA_DEVICE void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
FA_DEVICE void ldsm_x4(unsigned addr, unsigned* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
FA_DEVICE void ldsm_x4_t(unsigned addr, unsigned* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
FA_DEVICE void ldsm_x2_t(unsigned addr, unsigned* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
FA_DEVICE void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  if constexpr (fa_cfg::kDtype == 2) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
FA_DEVICE unsigned pack2(float lo, float hi) {
  unsigned r;
  if constexpr (fa_cfg::kDtype == 2) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}
FA_DEVICE void red_add2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(x) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p + 1), "f"(y) : "memory");
#endif
}
FA_DEVICE int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
FA_DEVICE void st_release(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// rows x (DIM / 8) 16-byte chunks from global (row stride gs elements) into shared (pitch elements); rows >= valid
// are zero-filled.
template <int ROWS, int DIM, int PITCH>
FA_DEVICE void load_tile(unsigned sdst, const T* g, long long gs, int valid, int tid) {
  constexpr int kChunks = DIM / 8;
  for (int idx = tid; idx < ROWS * kChunks; idx += W * 32) {
    const int r = idx / kChunks, c = idx - r * kChunks;
    const bool ok = r < valid;
    cp_async16(sdst + (unsigned)((r * PITCH + c * 8) * 2), ok ? (const void*)(g + r * gs + c * 8) : (const void*)g,
               ok ? 16 : 0);
  }
}
}  // namespace fa_bwd_mma

// Register discipline (zero spills at every point bwd_mma.cpp accepts): minBlocksPerSM = 1 is stated explicitly
// (without it ptxas trades a few bytes of spills for register-occupancy thresholds, 72/80/96/128/168 registers, at
// points no host-side rule can predict), and the reduction loops over kk are unrolled by 2 only (fully unrolled,
// ptxas hoists ldmatrix loads across the whole reduction and runs out of registers), so the register count
// follows the accumulator tiles that bwd_mma.cpp bounds.
extern "C" __global__ void __launch_bounds__(fa_cfg::kWarps * 32, 1) fa_kernel(const FaBwdArgs args) {
  using namespace fa_bwd_mma;
  extern __shared__ __align__(16) unsigned char fa_smem_raw[];
  T* sm = reinterpret_cast<T*>(fa_smem_raw);
  float* sLse = reinterpret_cast<float*>(sm + kEndHalf);
  float* sDelta = sLse + NS * BM;
  const FaFwdArgs& a = args.f;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int nb = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const FaSeq seq = fa_seq(a, b);
  const int n0 = nb * BN;
  if (n0 >= seq.sk) return;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const long long row0 = varlen ? seq.base_q : (long long)b * a.seqlen_q;
  const unsigned sbase = smem_u32(sm);

  // Zero the padded reduction columns once (cp.async never writes them).
  if constexpr (DP != D) {
    for (int r = tid; r < BN + NS * BM; r += W * 32) {
      T* row = r < BN ? sm + r * PK : sm + kOffQ + (r - BN) * PK;
      for (int c = D; c < DP; ++c) row[c] = 0;
    }
  }
  if constexpr (DVP != DV) {
    for (int r = tid; r < BN + NS * BM; r += W * 32) {
      T* row = r < BN ? sm + kOffV + r * PV : sm + kOffDo + (r - BN) * PV;
      for (int c = DV; c < DVP; ++c) row[c] = 0;
    }
  }
  {
    const long long kb = varlen ? 0 : (long long)b * a.k_sb, vb = varlen ? 0 : (long long)b * a.v_sb;
    const T* kg = static_cast<const T*>(a.k) + kb + (seq.base_k + n0) * a.k_ss + (long long)g * a.k_sh;
    const T* vg = static_cast<const T*>(a.v) + vb + (seq.base_k + n0) * a.v_ss + (long long)g * a.v_sh;
    load_tile<BN, D, PK>(sbase, kg, a.k_ss, seq.sk - n0, tid);
    load_tile<BN, DV, PV>(sbase + kOffV * 2, vg, a.v_ss, seq.sk - n0, tid);
    cp_commit();
  }

  // Query blocks whose tile meets the band j - off_r <= i <= j - off_l (exact; see the header).
  const int nmb = (seq.sq + BM - 1) / BM;
  int m_lo = 0, m_hi = nmb;
  if (a.win_right >= 0) {
    const int x = n0 - (seq.sk - seq.sq + a.win_right);
    if (x > seq.sq - 1) m_hi = 0;
    else if (x > 0) m_lo = x / BM;
  }
  if (a.win_left >= 0) {
    const int z = min(seq.sk, n0 + BN) - 1 - (seq.sk - seq.sq - a.win_left);
    m_hi = z < 0 ? 0 : min(m_hi, z / BM + 1);
  }
  const int nm = max(0, m_hi - m_lo);
  const int total = nm * a.group;

  const int wk = warp % WK, wx = warp / WK;  // GEMM 1/2 warp coordinates
  const int wq3 = warp % WQ3, wd3 = warp / WQ3;
  float acc_dk[MT1][NTK][4], acc_dv[MT1][NTV][4];
#pragma unroll
  for (int mt = 0; mt < MT1; ++mt) {
#pragma unroll
    for (int t = 0; t < NTK; ++t) acc_dk[mt][t][0] = acc_dk[mt][t][1] = acc_dk[mt][t][2] = acc_dk[mt][t][3] = 0.f;
#pragma unroll
    for (int t = 0; t < NTV; ++t) acc_dv[mt][t][0] = acc_dv[mt][t][1] = acc_dv[mt][t][2] = acc_dv[mt][t][3] = 0.f;
  }

  const long long qb = varlen ? 0 : (long long)b * a.q_sb, dob = varlen ? 0 : (long long)b * args.do_sb;
  const float neg_inf = -__int_as_float(0x7f800000), pos_inf = __int_as_float(0x7f800000);
  // Issues the loads of iteration `it` into stage `st`: Q, dO (cp.async), LSE * log2(e) and Delta (plain).
  auto issue = [&](int it, int st) {
    const int h = g * a.group + it / nm, m = m_lo + it % nm;
    const int i0 = m * BM;
    const T* qg = static_cast<const T*>(a.q) + qb + (seq.base_q + i0) * a.q_ss + (long long)h * a.q_sh;
    const T* dg = static_cast<const T*>(args.dout) + dob + (seq.base_q + i0) * args.do_ss + (long long)h * args.do_sh;
    load_tile<BM, D, PK>(sbase + (unsigned)((kOffQ + st * BM * PK) * 2), qg, a.q_ss, seq.sq - i0, tid);
    load_tile<BM, DV, PV>(sbase + (unsigned)((kOffDo + st * BM * PV) * 2), dg, args.do_ss, seq.sq - i0, tid);
    const long long li = (long long)b * a.lse_sb + (long long)h * a.lse_sh + seq.base_q + i0;
    for (int r = tid; r < BM; r += W * 32) {
      float l = pos_inf, dl = 0.f;
      if (i0 + r < seq.sq) {
        l = a.lse[li + r];
        l = l == neg_inf ? pos_inf : l * kLog2e;
        dl = args.delta[li + r];
      }
      sLse[st * BM + r] = l;
      sDelta[st * BM + r] = dl;
    }
  };
  if (total > 0) issue(0, 0);
  cp_commit();

  for (int it = 0; it < total; ++it) {
    const int st = NS == 2 ? (it & 1) : 0;
    if constexpr (NS == 1) {
      if (it > 0) {  // the previous iteration ended with a barrier: the single stage is free
        issue(it, 0);
        cp_commit();
      }
      cp_wait<0>();
    } else if (it + 1 < total) {
      issue(it + 1, (it + 1) & 1);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
    const int h = g * a.group + it / nm, m = m_lo + it % nm;
    const int i0 = m * BM;
    const unsigned sQ = sbase + (unsigned)((kOffQ + st * BM * PK) * 2);
    const unsigned sDo = sbase + (unsigned)((kOffDo + st * BM * PV) * 2);
    const float* lse2 = sLse + st * BM;
    const float* dlt = sDelta + st * BM;

    // ---- GEMM 1: S^T (keys x queries) and dP^T for this warp's tile.
    {
      float s[MT1][NT1][4], dp[MT1][NT1][4];
#pragma unroll
      for (int mt = 0; mt < MT1; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT1; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.f;
      const int krow0 = wk * MT1 * 16, qcol0 = wx * NT1 * 8;
      const int q8 = lane >> 3, r8 = lane & 7;
#pragma unroll 2
      for (int kk = 0; kk < DP / 16; ++kk) {
        unsigned af[MT1][4];
#pragma unroll
        for (int mt = 0; mt < MT1; ++mt)
          ldsm_x4(sbase + (unsigned)(((krow0 + mt * 16 + (q8 & 1) * 8 + r8) * PK + kk * 16 + (q8 >> 1) * 8) * 2), af[mt]);
#pragma unroll
        for (int nt = 0; nt < NT1; nt += 2) {
          unsigned bf[4];
          ldsm_x4(sQ + (unsigned)(((qcol0 + nt * 8 + (q8 >> 1) * 8 + r8) * PK + kk * 16 + (q8 & 1) * 8) * 2), bf);
#pragma unroll
          for (int mt = 0; mt < MT1; ++mt) {
            mma16816(s[mt][nt], af[mt], bf[0], bf[1]);
            mma16816(s[mt][nt + 1], af[mt], bf[2], bf[3]);
          }
        }
      }
#pragma unroll 2
      for (int kk = 0; kk < DVP / 16; ++kk) {
        unsigned af[MT1][4];
#pragma unroll
        for (int mt = 0; mt < MT1; ++mt)
          ldsm_x4(sbase + (unsigned)((kOffV + (krow0 + mt * 16 + (q8 & 1) * 8 + r8) * PV + kk * 16 + (q8 >> 1) * 8) * 2),
                  af[mt]);
#pragma unroll
        for (int nt = 0; nt < NT1; nt += 2) {
          unsigned bf[4];
          ldsm_x4(sDo + (unsigned)(((qcol0 + nt * 8 + (q8 >> 1) * 8 + r8) * PV + kk * 16 + (q8 & 1) * 8) * 2), bf);
#pragma unroll
          for (int mt = 0; mt < MT1; ++mt) {
            mma16816(dp[mt][nt], af[mt], bf[0], bf[1]);
            mma16816(dp[mt][nt + 1], af[mt], bf[2], bf[3]);
          }
        }
      }
      // Element-wise: P and dS', stored transposed-as-computed: sP[key][query], sdS[key][query].
      const int off = seq.sk - seq.sq;
      const float slope = fa_cfg::kHasAlibi ? a.alibi[h] : 0.f;
      const T* bias = fa_cfg::kHasBias ? static_cast<const T*>(a.bias) + (long long)b * a.bias_sb + (long long)h * a.bias_sh
                                       : nullptr;
#pragma unroll
      for (int mt = 0; mt < MT1; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT1; ++nt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int kr = krow0 + mt * 16 + (lane >> 2) + hf * 8;  // local key row
            const int j = n0 + kr;
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int qc = qcol0 + nt * 8 + (lane & 3) * 2 + e;  // local query column
              const int i = i0 + qc;
              const float x = s[mt][nt][hf * 2 + e];
              float p, dcap = 1.f;
              if constexpr (!fa_cfg::kHasSoftcap && !fa_cfg::kHasBias && !fa_cfg::kHasAlibi) {
                p = fa_exp2(x * a.scale_log2 - lse2[qc]);
              } else {
                float sv = x * a.scale;
                if constexpr (fa_cfg::kHasSoftcap) {
                  const float t = fa_tanh(sv * a.inv_softcap);
                  sv = a.softcap * t;
                  dcap = 1.f - t * t;
                }
                if constexpr (fa_cfg::kHasBias) {
                  if (i < seq.sq && j < seq.sk)
                    sv += FaElem<fa_cfg::kDtype>::to_float(bias[(long long)i * a.bias_sq + (long long)j * a.bias_sk]);
                }
                if constexpr (fa_cfg::kHasAlibi) sv -= slope * fabsf((float)(i + off - j));
                p = fa_exp2(sv * kLog2e - lse2[qc]);
              }
              bool vis = j < seq.sk;
              if (a.win_left >= 0) vis = vis && j >= i + off - a.win_left;
              if (a.win_right >= 0) vis = vis && j <= i + off + a.win_right;
              p = vis ? p : 0.f;
              pv[e] = p;
              dsv[e] = p * (dp[mt][nt][hf * 2 + e] - dlt[qc]) * dcap;
            }
            const int qc0 = qcol0 + nt * 8 + (lane & 3) * 2;
            *reinterpret_cast<unsigned*>(sm + kOffP + kr * PS + qc0) = pack2(pv[0], pv[1]);
            *reinterpret_cast<unsigned*>(sm + kOffDs + kr * PS + qc0) = pack2(dsv[0], dsv[1]);
          }
    }
    __syncthreads();

    // ---- GEMM 2: dV += P^T dO, dK += dS'^T Q (this warp: key strips wk, head-column tiles wx).
    {
      const int krow0 = wk * MT1 * 16;
      const int q8 = lane >> 3, r8 = lane & 7, r16 = lane & 15;
#pragma unroll 2
      for (int kk = 0; kk < BM / 16; ++kk) {
        unsigned ap[MT1][4], ad[MT1][4];
#pragma unroll
        for (int mt = 0; mt < MT1; ++mt) {
          const int o = (krow0 + mt * 16 + (q8 & 1) * 8 + r8) * PS + kk * 16 + (q8 >> 1) * 8;
          ldsm_x4(sbase + (unsigned)((kOffP + o) * 2), ap[mt]);
          ldsm_x4(sbase + (unsigned)((kOffDs + o) * 2), ad[mt]);
        }
#pragma unroll
        for (int t = 0; t < NTV; ++t) {
          const int nt = wx * NTV + t;
          if (NTV * WD2 == DV / 8 || nt < DV / 8) {
            unsigned bf[2];
            ldsm_x2_t(sDo + (unsigned)(((kk * 16 + r16) * PV + nt * 8) * 2), bf);
#pragma unroll
            for (int mt = 0; mt < MT1; ++mt) mma16816(acc_dv[mt][t], ap[mt], bf[0], bf[1]);
          }
        }
#pragma unroll
        for (int t = 0; t < NTK; ++t) {
          const int nt = wx * NTK + t;
          if (NTK * WD2 == D / 8 || nt < D / 8) {
            unsigned bf[2];
            ldsm_x2_t(sQ + (unsigned)(((kk * 16 + r16) * PK + nt * 8) * 2), bf);
#pragma unroll
            for (int mt = 0; mt < MT1; ++mt) mma16816(acc_dk[mt][t], ad[mt], bf[0], bf[1]);
          }
        }
      }
    }

    // ---- GEMM 3: dQ'_m += dS' K_n (this warp: query strips wq3, head-column tiles wd3), then red.add.
    {
      float dq[MT3][NT3][4];
#pragma unroll
      for (int mt = 0; mt < MT3; ++mt)
#pragma unroll
        for (int t = 0; t < NT3; ++t) dq[mt][t][0] = dq[mt][t][1] = dq[mt][t][2] = dq[mt][t][3] = 0.f;
      const int qrow0 = wq3 * MT3 * 16;
      const int q8 = lane >> 3, r8 = lane & 7, r16 = lane & 15;
#pragma unroll 2
      for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned af[MT3][4];
#pragma unroll
        for (int mt = 0; mt < MT3; ++mt)
          ldsm_x4_t(sbase + (unsigned)((kOffDs + (kk * 16 + (q8 >> 1) * 8 + r8) * PS + qrow0 + mt * 16 + (q8 & 1) * 8) * 2),
                    af[mt]);
#pragma unroll
        for (int t = 0; t < NT3; ++t) {
          const int nt = wd3 * NT3 + t;
          if (NT3 * WD3 == D / 8 || nt < D / 8) {
            unsigned bf[2];
            ldsm_x2_t(sbase + (unsigned)(((kk * 16 + r16) * PK + nt * 8) * 2), bf);
#pragma unroll
            for (int mt = 0; mt < MT3; ++mt) mma16816(dq[mt][t], af[mt], bf[0], bf[1]);
          }
        }
      }
      int* sem = nullptr;
      int ticket = 0;
      if (args.deterministic) {
        sem = reinterpret_cast<int*>(args.dk_accum) + (row0 + m) * a.heads_q + h;
        int n_lo = 0;
        if (a.win_left >= 0) {
          const int y = i0 + seq.sk - seq.sq - a.win_left;
          n_lo = y > 0 ? y / BN : 0;
        }
        ticket = nb - n_lo;
        if (tid == 0)
          while (ld_acquire(sem) != ticket) {
          }
        __syncthreads();
      }
      float* dqa = args.dq_accum + (row0 + i0) * args.accum_q_stride_row + (long long)h * D;
#pragma unroll
      for (int mt = 0; mt < MT3; ++mt)
#pragma unroll
        for (int t = 0; t < NT3; ++t) {
          const int nt = wd3 * NT3 + t;
          if (NT3 * WD3 == D / 8 || nt < D / 8) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              const int r = qrow0 + mt * 16 + (lane >> 2) + hf * 8;
              if (i0 + r < seq.sq)
                red_add2(dqa + r * args.accum_q_stride_row + nt * 8 + (lane & 3) * 2, dq[mt][t][hf * 2],
                         dq[mt][t][hf * 2 + 1]);
            }
          }
        }
      if (args.deterministic) {
        __threadfence();
        __syncthreads();
        if (tid == 0) st_release(sem, ticket + 1);
      }
    }
    __syncthreads();
  }

  // ---- Epilogue: dK = scale * acc_dk, dV = acc_dv in the dtype.
  cp_wait<0>();
  {
    const bool vl = varlen;
    const long long dkb = vl ? 0 : (long long)b * args.dk_sb, dvb = vl ? 0 : (long long)b * args.dv_sb;
    T* dkg = static_cast<T*>(args.dk) + dkb + (seq.base_k + n0) * args.dk_ss + (long long)g * args.dk_sh;
    T* dvg = static_cast<T*>(args.dv) + dvb + (seq.base_k + n0) * args.dv_ss + (long long)g * args.dv_sh;
    const int krow0 = wk * MT1 * 16;
#pragma unroll
    for (int mt = 0; mt < MT1; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = krow0 + mt * 16 + (lane >> 2) + hf * 8;
        if (n0 + r >= seq.sk) continue;
#pragma unroll
        for (int t = 0; t < NTK; ++t) {
          const int nt = wx * NTK + t;
          if (NTK * WD2 == D / 8 || nt < D / 8) {
            const unsigned pk = pack2(acc_dk[mt][t][hf * 2] * a.scale, acc_dk[mt][t][hf * 2 + 1] * a.scale);
            T* p = dkg + r * args.dk_ss + nt * 8 + (lane & 3) * 2;
            p[0] = (T)(pk & 0xffffu);
            p[1] = (T)(pk >> 16);
          }
        }
#pragma unroll
        for (int t = 0; t < NTV; ++t) {
          const int nt = wx * NTV + t;
          if (NTV * WD2 == DV / 8 || nt < DV / 8) {
            const unsigned pk = pack2(acc_dv[mt][t][hf * 2], acc_dv[mt][t][hf * 2 + 1]);
            T* p = dvg + r * args.dv_ss + nt * 8 + (lane & 3) * 2;
            p[0] = (T)(pk & 0xffffu);
            p[1] = (T)(pk >> 16);
          }
        }
      }
  }
}

#endif  // FA_BWD_MMA_CUH
