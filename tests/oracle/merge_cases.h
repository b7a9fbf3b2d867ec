// merge_cases.h -- random inputs of the partial-result merge (fa_merge_partials) with their float64 answer, shared
// by the CPU test of the merge math and the GPU test of the kernel (test code only).
//
// One causal attention problem [batch, seqlen, heads, dim] is computed by the oracle twice: in one pass over every
// key, and in `parts` passes over disjoint key ranges [cut_s, cut_{s+1}) (random cuts, empty ranges included). A
// part sees key j of its range from query i iff cut_s + j <= i (the global causal mask, through a mask_mod), so rows
// before the range's first key have no key there: LSE -inf. The parts are stored as fa_merge_partials takes them,
// float32 [parts, batch, heads, seqlen, dim] and [parts, batch, heads, seqlen], with the output of every -inf row
// poisoned (NaN: the merge must never read it).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/oracle/oracle.h"

namespace fa::oracle {

struct MergeCase {
  int batch = 1, seqlen = 1, heads = 1, dim = 8, parts = 1;
  std::vector<float> part_o, part_lse;  // fa_merge_partials' layouts
  std::vector<double> o, lse;  // the one-pass answer: o [batch, seqlen, heads, dim], lse [batch, heads, seqlen]
  size_t rows() const { return size_t(batch) * heads * seqlen; }
};

// `scale`: the softmax scale (large values give large LSEs, where an unstable merge overflows).
inline MergeCase make_merge_case(std::mt19937_64& rng, int batch, int seqlen, int heads, int dim, int parts,
                                 double scale) {
  MergeCase c;
  c.batch = batch;
  c.seqlen = seqlen;
  c.heads = heads;
  c.dim = dim;
  c.parts = parts;
  std::normal_distribution<double> n01(0.0, 1.0);
  const size_t elems = size_t(batch) * seqlen * heads * dim;
  std::vector<double> q(elems), k(elems), v(elems);
  for (auto* t : {&q, &k, &v})
    for (double& x : *t) x = n01(rng);
  Problem p;
  p.batch = batch;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.heads_q = p.heads_kv = heads;
  p.head_dim = dim;
  p.mask = kMaskCausal;
  p.scale = scale;
  const DenseForward full = forward(p, q, k, v);
  c.o = full.o;
  c.lse = full.lse;

  std::vector<int> cuts = {0, seqlen};
  for (int s = 1; s < parts; ++s) cuts.push_back(std::uniform_int_distribution<int>(0, seqlen)(rng));
  std::sort(cuts.begin(), cuts.end());
  const size_t rows = c.rows();
  c.part_o.assign(size_t(parts) * rows * dim, 0.0f);
  c.part_lse.assign(size_t(parts) * rows, 0.0f);
  const long long row_stride = static_cast<long long>(heads) * dim;  // BSHD
  for (int s = 0; s < parts; ++s) {
    const int a = cuts[size_t(s)], len = cuts[size_t(s) + 1] - a;
    Problem ps = p;
    ps.mask = kMaskNone;
    ps.seqlen_k = len;
    ps.mask_mod = [a](int, int, int i, int j) { return a + j <= i; };
    std::vector<double> ks(size_t(batch) * std::max(len, 0) * heads * dim), vs(ks.size());
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < len; ++j)
        for (long long e = 0; e < row_stride; ++e) {
          const size_t src = (size_t(b) * seqlen + size_t(a + j)) * size_t(row_stride) + size_t(e);
          const size_t dst = (size_t(b) * len + size_t(j)) * size_t(row_stride) + size_t(e);
          ks[dst] = k[src];
          vs[dst] = v[src];
        }
    const DenseForward part = forward(ps, q, ks, vs);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < seqlen; ++i) {
          const size_t row = (size_t(b) * heads + size_t(h)) * seqlen + size_t(i);  // [batch, heads, seqlen]
          const double l = part.lse[row];
          c.part_lse[size_t(s) * rows + row] = static_cast<float>(l);
          for (int d = 0; d < dim; ++d) {
            const double x = part.o[((size_t(b) * seqlen + size_t(i)) * heads + size_t(h)) * dim + size_t(d)];
            c.part_o[(size_t(s) * rows + row) * dim + size_t(d)] =
                std::isinf(l) ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(x);
          }
        }
  }
  return c;
}

}  // namespace fa::oracle
