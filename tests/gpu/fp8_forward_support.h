// fp8_forward_support.h -- the fp8 forward tests' problems (tests/gpu/test_forward_fp8.cpp): q, k, v as fp8 codes
// (e4m3 / e5m2) with descales (one per tensor, or per (batch, KV head) as FlashAttention 3's), o bf16 / fp16,
// contiguous BSHD (varlen: packed); the float64 oracle over the dequantized inputs, and the error bound that P's
// rounding to e4m3 allows (Fp8Case::bound); a run through fa_run or through fwd_wgmma's plan at given tunables.
//
// The bound, per output element (i, h, n), with M = sum_j P_ij |V_jn| (the oracle over |v|) and the reference O:
//   |O - O_ref| <= ((1 + 2^-3) exp(2 ds_ih) - 1) M + 2^-8 |O_ref| + 1e-6   (2^-3 M where ds_ih = 0)
// - P rounding: the kernel rounds each probability p (relative to the running row maximum, in [0, 1]) to e4m3 before
//   O += P V; in e4m3's normal range the error is at most 2^-4 p (3 mantissa bits), below 2^-6 (subnormals) at most
//   min(p, 2^-10); the row sum l keeps the float32 p, so the error of O is at most 2^-4 M plus the subnormal tail,
//   and 2^-3 M covers both (the tail's keys have P l < 2^-6: a small share of M);
// - S accumulation: fp8 tensor cores keep about 14 bits of the running sum between k32 steps, so a score s = S scale
//   may be off by ds = ceil(d / 32) 2^-13 scale |q|_1 max|k| (the dequantized row's 1-norm and its head's largest
//   key): a weight P_ij / l_i changes by a factor within exp(+-2 ds), O by at most (exp(2 ds) - 1) M, and with P's
//   rounding on top by ((1 + 2^-3) exp(2 ds) - 1) M (not the linearized 2 ds M: ds reaches 0.2 for e5m2 data with
//   outliers, where an error of 0.55 M was seen, above 2^-3 M + 2 ds M and within this);
// - the output's rounding to bf16 / fp16: 2^-9 / 2^-11 relative, within 2^-8 |O_ref|.
// The LSE: |lse - lse_ref| <= 2e-4 max(1, |lse_ref|) + ds (l is summed in float32 from the unrounded p).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "generator/config.h"
#include "tests/gpu/gpu_support.h"

namespace fa::test {

struct Fp8Spec {
  int dtype = FA_DTYPE_E4M3, o_dtype = FA_DTYPE_BF16;
  int batch = 2, sq = 100, sk = 100, hq = 4, hkv = 2, d = 128, dv = 128;
  int mask = FA_MASK_NONE, wl = -1, wr = -1;
  bool alibi = false;
  float softcap = 0.f;
  float scale = 0.f;             // 0: 1 / sqrt(d)
  bool varlen = false;           // sequences of random lengths up to sq / sk (an empty one among them)
  bool outliers = false;         // N(0, 1) plus, at 0.1% of the entries, N(0, 10^2) (FlashAttention 3's test data)
  bool per_head_descale = true;  // descales [batch, hkv] (strides hkv, 1), else one per tensor (strides 0)
  bool lse = true;
};
std::string describe(const Fp8Spec& s);

struct Fp8Case {
  Fp8Spec s;
  oracle::Problem op;
  std::vector<uint8_t> q, k, v;  // codes, contiguous [tokens, heads, dim] per batch (varlen: packed)
  std::vector<float> descale_q, descale_k, descale_v;  // [batch * hkv] (per tensor: all equal, strides 0 in params)
  std::vector<float> alibi_f;
  std::vector<double> alibi;
  std::vector<int> cu_q, cu_k;                    // varlen offsets
  long long tq = 0, tk = 0;                       // tokens per batch entry (varlen: totals)
  std::vector<double> o_ref, lse_ref, o_mag, ds;  // the oracle's O and LSE, M (above), ds per (token, head)
  size_t o_n = 0, lse_n = 0;
  DevBuf d_q, d_k, d_v, d_o, d_lse, d_dq, d_dk, d_dv, d_alibi, d_cuq, d_cuk;
  fa_params params;
};

// Lays out c for spec s (lengths, varlen offsets, alibi slopes) and fills q, k, v with quantized random data: values of
// N(0, 1) (with outliers if asked) per (batch, KV head) group, or per tensor, scaled by fp8_max / amax and rounded
// (saturating) to the format; the descales are amax / fp8_max (FlashAttention 3's convention). Then finish(c).
void make_fp8_case(std::mt19937_64& rng, const Fp8Spec& s, Fp8Case* c);
// The layout of c for c->s (lengths, varlen offsets), codes and descales left to the caller (all zero / 1).
void layout_fp8_case(std::mt19937_64& rng, Fp8Case* c);
// The oracle (O, LSE, M, ds) over c's codes and descales, the device buffers and c->params.
void finish(Fp8Case* c);

struct Fp8Result {
  std::string failure;  // empty: ran and met the bound
  double err_o = 0;     // max |O - O_ref|
  double ratio = 0;     // max |O - O_ref| / (2^-4 M + 2^-8 |O_ref| + 1e-6): P's rounding alone is 1 at most
  double err_lse = 0;   // max |lse - lse_ref| over finite LSEs
  std::string key;      // the kernel that ran (fa_run: fa_problem_key)
};
// Runs c through fa_run (t null) or through fwd_wgmma's plan at tunables t, outputs poisoned first, and checks it
// against the bound (every output written, infinite LSEs equal).
Fp8Result run_fp8(Fp8Case& c, const gen::Tunables* t = nullptr);
// The fp8 output of c's last run, decoded (o_dtype).
std::vector<double> fp8_output(Fp8Case& c);

}  // namespace fa::test
