/*
 * oracle.h -- the float64 CPU reference of fa's attention, forward and backward (test code only).
 *
 * Implements exactly the semantics in the header comment of include/fa/fa.h, in double precision:
 *   for batch b, query head h (kv head g = h / (heads_q / heads_kv)), query row i < Sq(b), key j < Sk(b):
 *     x_ij = scale * dot(q[b,i,h,:], k[b,j,g,:])                  (scale 0 means 1/sqrt(head_dim))
 *     s_ij = softcap * tanh(x_ij / softcap)                        (softcap > 0; otherwise s_ij = x_ij)
 *     s_ij += bias[b*sb + h*sh + i*sq + j*sk]                      (bias != nullptr; i, j local to the sequence)
 *     s_ij += -alibi[h] * |i + Sk - Sq - j|                        (alibi != nullptr)
 *     s_ij = score_mod(s_ij, b, h, i, j)                          (score_mod set)
 *     s_ij = -inf where the mask or mask_mod(b, h, i, j) == false hides j from i (bottom-right aligned; key_visible)
 *     lse_i = log(exp(sink_h) + sum_j exp(s_ij)),  o_i = sum_j exp(s_ij - lse_i) v[b,j,g,:]
 *                                                             (the sink term only with sinks != nullptr)
 *   A row with every key hidden (or Sk = 0) gives o_i = 0 and lse_i = -inf, or sink_h with sinks.
 * Backward, given dO (P_ij = exp(s_ij - lse_i), D_i = dot(dO_i, o_i)):
 *     dP_ij = dot(dO_i, v_j),  dS_ij = P_ij (dP_ij - D_i),  dX_ij = dS_ij * (1 - tanh^2(x_ij / softcap)) (softcap)
 *                                                             * score_mod_grad(s_ij, b, h, i, j)   (score_mod; s_ij
 *                                                               before score_mod, as score_mod received it)
 *     dq_i = scale * sum_j dX_ij k_j,  dk_j = scale * sum_{h in group, i} dX_ij q_i,
 *     dv_j = sum_{h in group, i} P_ij dO_i
 *     dsink_h = -sum_{b, i} exp(sink_h - lse_i) D_i              (sinks; the sink's dP is 0: it has no value)
 *   No gradient with respect to bias or alibi slopes.
 *
 * Layout: tensors are [batch, seqlen, heads, dim] with element strides (sb, ss, sh) and a contiguous last dim.
 * Varlen (cu_seqlens_q/k non-empty, batch+1 host offsets): tensors are packed [total_tokens, heads, dim], sb is
 * ignored and sequence b holds tokens cu[b] .. cu[b+1]-1. LSE is [batch, heads_q, seqlen_q] contiguous, or in varlen
 * mode [heads_q, total_q] (see lse_index). Outputs are written only at valid positions (i < Sq(b), j < Sk(b)).
 * Invalid problems throw std::invalid_argument (this is test code).
 */
#ifndef FA_TESTS_ORACLE_ORACLE_H
#define FA_TESTS_ORACLE_ORACLE_H

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

namespace fa::oracle {

// Values of fa_mask (include/fa/fa.h).
inline constexpr int kMaskNone = 0;
inline constexpr int kMaskCausal = 1;
inline constexpr int kMaskSlidingWindow = 2;

// A read-only strided [batch, seqlen, heads, dim] view; element strides, last dim contiguous.
struct Tensor4 {
  const double* data = nullptr;
  long long sb = 0, ss = 0, sh = 0;
};
// The writable counterpart (outputs).
struct MutTensor4 {
  double* data = nullptr;
  long long sb = 0, ss = 0, sh = 0;
};

struct Problem {
  int batch = 1;
  int seqlen_q = 0;  // fixed-length mode only
  int seqlen_k = 0;  // fixed-length mode only
  int heads_q = 1;
  int heads_kv = 1;
  int head_dim = 0;
  int head_dim_v = 0;                           // 0 means head_dim
  std::vector<int> cu_seqlens_q, cu_seqlens_k;  // both empty: fixed length; else batch+1 offsets (varlen)
  int mask = kMaskNone;
  int window_left = -1, window_right = -1;  // sliding window only; -1 = unbounded side
  const double* bias = nullptr;             // nullptr: no bias
  long long bias_sb = 0, bias_sh = 0, bias_sq = 0, bias_sk = 0;
  const double* alibi = nullptr;  // [heads_q] or nullptr
  const double* sinks = nullptr;  // [heads_q] sink logits (attention sinks) or nullptr; -inf: no sink for that head
  double softcap = 0.0;           // > 0 enables
  double scale = 0.0;             // 0 means 1/sqrt(head_dim)
  // User code (fa_mods): the score after ALiBi is score_mod(s, b, h, i, j); a key is hidden where mask_mod(b, h, i,
  // j) is false (on top of the mask). The backward needs score_mod_grad (d score_mod / d s at the same s) whenever
  // score_mod is set. Empty: none. i, j local to the sequence.
  std::function<double(double s, int b, int h, int i, int j)> score_mod;
  std::function<double(double s, int b, int h, int i, int j)> score_mod_grad;
  std::function<bool(int b, int h, int i, int j)> mask_mod;
};

// ---- problem queries -------------------------------------------------------------------------------------------
void validate(const Problem& p);  // throws std::invalid_argument naming the bad field
bool is_varlen(const Problem& p);
int seqlen_q_of(const Problem& p, int b);
int seqlen_k_of(const Problem& p, int b);
int head_dim_v_of(const Problem& p);
double effective_scale(const Problem& p);
long long tokens_q(const Problem& p);  // varlen: cu_seqlens_q[batch]; else batch * seqlen_q
long long tokens_k(const Problem& p);
long long lse_size(const Problem& p);  // heads_q * tokens_q
long long lse_index(const Problem& p, int b, int h, int i);
// The mask alone (no bias/alibi): whether key j is visible to query row i of a sequence with lengths sq, sk.
bool key_visible(const Problem& p, int i, int j, int sq, int sk);

// ---- strided interface -----------------------------------------------------------------------------------------
// o has the strides given (head_dim_v wide); lse may be nullptr.
void forward(const Problem& p, Tensor4 q, Tensor4 k, Tensor4 v, MutTensor4 o, double* lse);
// dq like q, dk like k, dv like v (strides given). dk/dv are summed over the query heads of a GQA group. dsinks
// ([heads_q]; written when non-null, which p.sinks requires): the sinks' gradient.
void backward(const Problem& p, Tensor4 q, Tensor4 k, Tensor4 v, Tensor4 dout, MutTensor4 dq, MutTensor4 dk,
              MutTensor4 dv, double* dsinks = nullptr);

// ---- dense convenience (contiguous BSHD: fixed [batch, seqlen, heads, dim], varlen [total, heads, dim]) ----------
struct DenseForward {
  std::vector<double> o;    // tokens_q * heads_q * head_dim_v
  std::vector<double> lse;  // lse_size
};
struct DenseBackward {
  std::vector<double> dq, dk, dv;
  std::vector<double> dsinks;  // heads_q with p.sinks, else empty
};
DenseForward forward(const Problem& p, std::span<const double> q, std::span<const double> k, std::span<const double> v);
DenseBackward backward(const Problem& p, std::span<const double> q, std::span<const double> k,
                       std::span<const double> v, std::span<const double> dout);

// ---- comparison ------------------------------------------------------------------------------------------------
// ||got - ref||_2 / ||ref||_2 over elements. +inf when the sizes differ, when any element of either is NaN, or when
// an infinity in one is not the same-signed infinity in the other (same-signed infinities compare equal and add
// nothing). When ||ref||_2 == 0 the result is 0 if got matches exactly, else +inf.
double relative_error(std::span<const double> got, std::span<const double> ref);
double relative_error(std::span<const float> got, std::span<const double> ref);

}  // namespace fa::oracle

#endif  // FA_TESTS_ORACLE_ORACLE_H
