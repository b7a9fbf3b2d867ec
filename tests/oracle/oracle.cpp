// oracle.cpp -- float64 reference attention (forward, backward, comparison); semantics in oracle.h.
#include "tests/oracle/oracle.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace fa::oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("fa::oracle: " + what); }

// Element offset of row (b, token t of the sequence, head h) in a strided tensor.
long long row_offset(const Problem& p, const std::vector<int>& cu, long long sb, long long ss, long long sh, int b,
                     int t, int h) {
  const long long token = is_varlen(p) ? static_cast<long long>(cu[static_cast<size_t>(b)]) + t : t;
  const long long batch_term = is_varlen(p) ? 0 : static_cast<long long>(b) * sb;
  return batch_term + token * ss + static_cast<long long>(h) * sh;
}

const double* q_row(const Problem& p, const Tensor4& t, int b, int i, int h) {
  return t.data + row_offset(p, p.cu_seqlens_q, t.sb, t.ss, t.sh, b, i, h);
}
const double* k_row(const Problem& p, const Tensor4& t, int b, int j, int g) {
  return t.data + row_offset(p, p.cu_seqlens_k, t.sb, t.ss, t.sh, b, j, g);
}
double* q_row(const Problem& p, const MutTensor4& t, int b, int i, int h) {
  return t.data + row_offset(p, p.cu_seqlens_q, t.sb, t.ss, t.sh, b, i, h);
}
double* k_row(const Problem& p, const MutTensor4& t, int b, int j, int g) {
  return t.data + row_offset(p, p.cu_seqlens_k, t.sb, t.ss, t.sh, b, j, g);
}

double dot(const double* a, const double* b, int n) {
  double acc = 0.0;
  for (int d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// One query row of one head: probabilities P_j (0 where hidden) and, for the backward, the derivative dS/dX_j of
// softcap and score_mod. Returns lse (-inf when every key is hidden).
struct RowScratch {
  std::vector<double> prob, dsdx;
};

double row_softmax(const Problem& p, Tensor4 q, Tensor4 k, int b, int h, int i, int sq, int sk, RowScratch& rs) {
  const int g = h / (p.heads_q / p.heads_kv);
  const double scale = effective_scale(p);
  const size_t n = static_cast<size_t>(sk);
  rs.prob.assign(n, -kInf);
  rs.dsdx.assign(n, 0.0);
  const double* qi = q_row(p, q, b, i, h);
  double row_max = -kInf;
  for (int j = 0; j < sk; ++j) {
    if (!key_visible(p, i, j, sq, sk)) continue;
    const size_t sj = static_cast<size_t>(j);
    const double x = scale * dot(qi, k_row(p, k, b, j, g), p.head_dim);
    double s = x;
    double dsdx = 1.0;
    if (p.softcap > 0.0) {
      const double t = std::tanh(x / p.softcap);
      s = p.softcap * t;
      dsdx = 1.0 - t * t;
    }
    if (p.bias != nullptr) {
      s += p.bias[static_cast<long long>(b) * p.bias_sb + static_cast<long long>(h) * p.bias_sh +
                  static_cast<long long>(i) * p.bias_sq + static_cast<long long>(j) * p.bias_sk];
    }
    if (p.alibi != nullptr) { s -= p.alibi[h] * std::fabs(static_cast<double>(i + sk - sq - j)); }
    if (p.mask_mod && !p.mask_mod(b, h, i, j)) continue;
    if (p.score_mod) {
      if (p.score_mod_grad) dsdx *= p.score_mod_grad(s, b, h, i, j);  // at the s score_mod receives
      s = p.score_mod(s, b, h, i, j);
    }
    rs.prob[sj] = s;
    rs.dsdx[sj] = dsdx;
    if (s > row_max) row_max = s;
  }
  const double sink = p.sinks != nullptr ? p.sinks[h] : -kInf;  // one more column, never hidden, no value
  if (sink > row_max) row_max = sink;
  if (row_max == -kInf) {  // every key hidden (or Sk = 0), and no sink
    rs.prob.assign(n, 0.0);
    return -kInf;
  }
  double sum = std::exp(sink - row_max);
  for (double s : rs.prob) sum += std::exp(s - row_max);  // exp(-inf) = 0 for hidden keys
  const double lse = row_max + std::log(sum);
  for (double& s : rs.prob) s = std::exp(s - lse);
  return lse;
}

long long dense_count(long long tokens, int heads, int dim) { return tokens * heads * dim; }

void check_size(std::span<const double> s, long long want, const char* name) {
  if (static_cast<long long>(s.size()) != want) {
    bad(std::string(name) + ": expected " + std::to_string(want) + " elements, got " + std::to_string(s.size()));
  }
}

template <typename T>
Tensor4 dense_view(const Problem& p, T* data, int seqlen, int heads, int dim) {
  const long long sh = dim;
  const long long ss = sh * heads;
  const long long sb = is_varlen(p) ? 0 : ss * seqlen;
  return Tensor4{data, sb, ss, sh};
}
MutTensor4 mut(const Tensor4& t, double* data) { return MutTensor4{data, t.sb, t.ss, t.sh}; }

template <typename G>
double relative_error_impl(std::span<const G> got, std::span<const double> ref) {
  if (got.size() != ref.size()) return kInf;
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t n = 0; n < ref.size(); ++n) {
    const double a = static_cast<double>(got[n]);
    const double r = ref[n];
    if (std::isnan(a) || std::isnan(r)) return kInf;
    if (std::isinf(a) || std::isinf(r)) {
      if (a != r) return kInf;
      continue;
    }
    diff2 += (a - r) * (a - r);
    ref2 += r * r;
  }
  if (ref2 == 0.0) return diff2 == 0.0 ? 0.0 : kInf;
  return std::sqrt(diff2) / std::sqrt(ref2);
}

}  // namespace

// ---- problem queries -------------------------------------------------------------------------------------------
bool is_varlen(const Problem& p) { return !p.cu_seqlens_q.empty(); }

void validate(const Problem& p) {
  if (p.batch < 1) bad("batch must be >= 1, got " + std::to_string(p.batch));
  if (p.heads_q < 1 || p.heads_kv < 1 || p.heads_q % p.heads_kv != 0) {
    bad("heads_kv must be >= 1 and divide heads_q, got heads_q=" + std::to_string(p.heads_q) +
        " heads_kv=" + std::to_string(p.heads_kv));
  }
  if (p.head_dim < 1) bad("head_dim must be >= 1, got " + std::to_string(p.head_dim));
  if (p.head_dim_v < 0) bad("head_dim_v must be >= 0, got " + std::to_string(p.head_dim_v));
  if (p.cu_seqlens_q.empty() != p.cu_seqlens_k.empty()) bad("cu_seqlens_q and cu_seqlens_k: both or neither");
  if (is_varlen(p)) {
    for (const auto* cu : {&p.cu_seqlens_q, &p.cu_seqlens_k}) {
      const char* name = cu == &p.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k";
      if (cu->size() != static_cast<size_t>(p.batch) + 1) {
        bad(std::string(name) + " must hold batch+1 offsets, got " + std::to_string(cu->size()));
      }
      if ((*cu)[0] != 0) bad(std::string(name) + "[0] must be 0");
      for (size_t b = 0; b + 1 < cu->size(); ++b) {
        if ((*cu)[b + 1] < (*cu)[b]) bad(std::string(name) + " must be non-decreasing");
      }
    }
  } else if (p.seqlen_q < 0 || p.seqlen_k < 0) {
    bad("seqlen_q and seqlen_k must be >= 0");
  }
  if (p.mask != kMaskNone && p.mask != kMaskCausal && p.mask != kMaskSlidingWindow) {
    bad("mask must be 0, 1 or 2, got " + std::to_string(p.mask));
  }
  if (p.window_left < -1 || p.window_right < -1) bad("window_left/right must be >= -1");
  if (!(p.softcap >= 0.0)) bad("softcap must be >= 0");
  if (!std::isfinite(p.scale)) bad("scale must be finite");
}

int seqlen_q_of(const Problem& p, int b) {
  if (!is_varlen(p)) return p.seqlen_q;
  const size_t sb = static_cast<size_t>(b);
  return p.cu_seqlens_q[sb + 1] - p.cu_seqlens_q[sb];
}
int seqlen_k_of(const Problem& p, int b) {
  if (!is_varlen(p)) return p.seqlen_k;
  const size_t sb = static_cast<size_t>(b);
  return p.cu_seqlens_k[sb + 1] - p.cu_seqlens_k[sb];
}
int head_dim_v_of(const Problem& p) { return p.head_dim_v == 0 ? p.head_dim : p.head_dim_v; }
double effective_scale(const Problem& p) {
  return p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
}
long long tokens_q(const Problem& p) {
  return is_varlen(p) ? p.cu_seqlens_q.back() : static_cast<long long>(p.batch) * p.seqlen_q;
}
long long tokens_k(const Problem& p) {
  return is_varlen(p) ? p.cu_seqlens_k.back() : static_cast<long long>(p.batch) * p.seqlen_k;
}
long long lse_size(const Problem& p) { return tokens_q(p) * p.heads_q; }
long long lse_index(const Problem& p, int b, int h, int i) {
  if (is_varlen(p)) return static_cast<long long>(h) * tokens_q(p) + p.cu_seqlens_q[static_cast<size_t>(b)] + i;
  return (static_cast<long long>(b) * p.heads_q + h) * p.seqlen_q + i;
}

bool key_visible(const Problem& p, int i, int j, int sq, int sk) {
  const long long diag = static_cast<long long>(i) + sk - sq;  // the key aligned with row i (bottom-right)
  switch (p.mask) {
    case kMaskCausal: return j <= diag;
    case kMaskSlidingWindow:
      if (p.window_left >= 0 && j < diag - p.window_left) return false;
      if (p.window_right >= 0 && j > diag + p.window_right) return false;
      return true;
    default: return true;
  }
}

// ---- forward / backward ----------------------------------------------------------------------------------------
void forward(const Problem& p, Tensor4 q, Tensor4 k, Tensor4 v, MutTensor4 o, double* lse) {
  validate(p);
  const int group = p.heads_q / p.heads_kv;
  const int dv = head_dim_v_of(p);
  RowScratch rs;
  for (int b = 0; b < p.batch; ++b) {
    const int sq = seqlen_q_of(p, b);
    const int sk = seqlen_k_of(p, b);
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / group;
      for (int i = 0; i < sq; ++i) {
        const double row_lse = row_softmax(p, q, k, b, h, i, sq, sk, rs);
        double* oi = q_row(p, o, b, i, h);
        for (int d = 0; d < dv; ++d) oi[d] = 0.0;
        for (int j = 0; j < sk; ++j) {
          const double pj = rs.prob[static_cast<size_t>(j)];
          if (pj == 0.0) continue;
          const double* vj = k_row(p, v, b, j, g);
          for (int d = 0; d < dv; ++d) oi[d] += pj * vj[d];
        }
        if (lse != nullptr) lse[lse_index(p, b, h, i)] = row_lse;
      }
    }
  }
}

void backward(const Problem& p, Tensor4 q, Tensor4 k, Tensor4 v, Tensor4 dout, MutTensor4 dq, MutTensor4 dk,
              MutTensor4 dv, double* dsinks) {
  validate(p);
  if (p.score_mod && !p.score_mod_grad) bad("score_mod_grad: the backward of a score_mod needs its derivative");
  if (dsinks != nullptr && p.sinks == nullptr) bad("dsinks: the gradient of sinks needs p.sinks");
  if (dsinks != nullptr)
    for (int h = 0; h < p.heads_q; ++h) dsinks[h] = 0.0;
  const int group = p.heads_q / p.heads_kv;
  const int dim_v = head_dim_v_of(p);
  const double scale = effective_scale(p);
  RowScratch rs;
  std::vector<double> oi(static_cast<size_t>(dim_v));
  std::vector<double> dx;
  for (int b = 0; b < p.batch; ++b) {
    const int sq = seqlen_q_of(p, b);
    const int sk = seqlen_k_of(p, b);
    for (int g = 0; g < p.heads_kv; ++g) {
      for (int j = 0; j < sk; ++j) {
        double* dkj = k_row(p, dk, b, j, g);
        double* dvj = k_row(p, dv, b, j, g);
        for (int d = 0; d < p.head_dim; ++d) dkj[d] = 0.0;
        for (int d = 0; d < dim_v; ++d) dvj[d] = 0.0;
      }
    }
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / group;
      for (int i = 0; i < sq; ++i) {
        const double row_lse = row_softmax(p, q, k, b, h, i, sq, sk, rs);
        const double* qi = q_row(p, q, b, i, h);
        const double* doi = q_row(p, dout, b, i, h);
        double* dqi = q_row(p, dq, b, i, h);
        for (int d = 0; d < p.head_dim; ++d) dqi[d] = 0.0;
        // o_i and D_i = dot(dO_i, o_i)
        for (double& x : oi) x = 0.0;
        for (int j = 0; j < sk; ++j) {
          const double pj = rs.prob[static_cast<size_t>(j)];
          if (pj == 0.0) continue;
          const double* vj = k_row(p, v, b, j, g);
          for (int d = 0; d < dim_v; ++d) oi[static_cast<size_t>(d)] += pj * vj[d];
        }
        const double delta = dot(doi, oi.data(), dim_v);
        if (dsinks != nullptr && row_lse != -kInf) dsinks[h] -= std::exp(p.sinks[h] - row_lse) * delta;
        dx.assign(static_cast<size_t>(sk), 0.0);
        for (int j = 0; j < sk; ++j) {
          const size_t sj = static_cast<size_t>(j);
          const double pj = rs.prob[sj];
          if (pj == 0.0) continue;
          const double dp = dot(doi, k_row(p, v, b, j, g), dim_v);
          dx[sj] = pj * (dp - delta) * rs.dsdx[sj];
          double* dvj = k_row(p, dv, b, j, g);
          for (int d = 0; d < dim_v; ++d) dvj[d] += pj * doi[d];
        }
        for (int j = 0; j < sk; ++j) {
          const double w = scale * dx[static_cast<size_t>(j)];
          if (w == 0.0) continue;
          const double* kj = k_row(p, k, b, j, g);
          double* dkj = k_row(p, dk, b, j, g);
          for (int d = 0; d < p.head_dim; ++d) {
            dqi[d] += w * kj[d];
            dkj[d] += w * qi[d];
          }
        }
      }
    }
  }
}

// ---- dense convenience -----------------------------------------------------------------------------------------
DenseForward forward(const Problem& p, std::span<const double> q, std::span<const double> k,
                     std::span<const double> v) {
  validate(p);
  const int dim_v = head_dim_v_of(p);
  check_size(q, dense_count(tokens_q(p), p.heads_q, p.head_dim), "q");
  check_size(k, dense_count(tokens_k(p), p.heads_kv, p.head_dim), "k");
  check_size(v, dense_count(tokens_k(p), p.heads_kv, dim_v), "v");
  DenseForward out;
  out.o.assign(static_cast<size_t>(dense_count(tokens_q(p), p.heads_q, dim_v)), 0.0);
  out.lse.assign(static_cast<size_t>(lse_size(p)), -kInf);
  const Tensor4 o = dense_view(p, out.o.data(), p.seqlen_q, p.heads_q, dim_v);
  forward(p, dense_view(p, q.data(), p.seqlen_q, p.heads_q, p.head_dim),
          dense_view(p, k.data(), p.seqlen_k, p.heads_kv, p.head_dim),
          dense_view(p, v.data(), p.seqlen_k, p.heads_kv, dim_v), mut(o, out.o.data()), out.lse.data());
  return out;
}

DenseBackward backward(const Problem& p, std::span<const double> q, std::span<const double> k,
                       std::span<const double> v, std::span<const double> dout) {
  validate(p);
  const int dim_v = head_dim_v_of(p);
  check_size(q, dense_count(tokens_q(p), p.heads_q, p.head_dim), "q");
  check_size(k, dense_count(tokens_k(p), p.heads_kv, p.head_dim), "k");
  check_size(v, dense_count(tokens_k(p), p.heads_kv, dim_v), "v");
  check_size(dout, dense_count(tokens_q(p), p.heads_q, dim_v), "dout");
  DenseBackward out;
  out.dq.assign(q.size(), 0.0);
  out.dk.assign(k.size(), 0.0);
  out.dv.assign(v.size(), 0.0);
  out.dsinks.assign(p.sinks != nullptr ? static_cast<size_t>(p.heads_q) : 0, 0.0);
  const Tensor4 tq = dense_view(p, q.data(), p.seqlen_q, p.heads_q, p.head_dim);
  const Tensor4 tk = dense_view(p, k.data(), p.seqlen_k, p.heads_kv, p.head_dim);
  const Tensor4 tv = dense_view(p, v.data(), p.seqlen_k, p.heads_kv, dim_v);
  backward(p, tq, tk, tv, dense_view(p, dout.data(), p.seqlen_q, p.heads_q, dim_v), mut(tq, out.dq.data()),
           mut(tk, out.dk.data()), mut(tv, out.dv.data()), p.sinks != nullptr ? out.dsinks.data() : nullptr);
  return out;
}

// ---- comparison ------------------------------------------------------------------------------------------------
double relative_error(std::span<const double> got, std::span<const double> ref) {
  return relative_error_impl(got, ref);
}
double relative_error(std::span<const float> got, std::span<const double> ref) { return relative_error_impl(got, ref); }

}  // namespace fa::oracle
