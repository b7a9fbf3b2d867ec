// problem_layout.cpp -- the private buffers of a timing problem and its parameters (see problem_layout.h).
#include "tuner/problem_layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace fa::tune {

ProblemLayout problem_layout(const gen::ProblemDesc& p) {
  ProblemLayout l;
  const size_t b = static_cast<size_t>(p.batch);
  size_t kv_rows = b * static_cast<size_t>(p.seqlen_k);  // rows of the k / v tensors (or pools)
  if (p.paged) {
    l.pages_per_seq = std::max(1, (p.seqlen_k + p.page_size - 1) / p.page_size);
    l.num_pages = p.batch * l.pages_per_seq;
    l.block_table = b * static_cast<size_t>(l.pages_per_seq);
    kv_rows = static_cast<size_t>(l.num_pages) * static_cast<size_t>(p.page_size);
  }
  l.q = b * p.seqlen_q * p.heads_q * p.head_dim;
  l.k = kv_rows * p.heads_kv * p.head_dim;
  l.v_in_k = p.v_in_k;
  l.v = l.v_in_k ? 0 : kv_rows * p.heads_kv * p.head_dim_v;
  l.o = b * p.seqlen_q * p.heads_q * p.head_dim_v;
  l.lse = b * p.heads_q * p.seqlen_q;
  if (p.has_bias) l.bias = static_cast<size_t>(p.seqlen_q) * p.seqlen_k;
  if (p.has_alibi) l.alibi = static_cast<size_t>(p.heads_q);
  if (p.seqused) l.seqused = b;
  if (p.has_sinks) l.sinks = static_cast<size_t>(p.heads_q);
  return l;
}

fa_params problem_params(const gen::ProblemDesc& p, float softcap, const ProblemLayout& l, const ProblemBuffers& b) {
  fa_params fp;
  fa_params_init(&fp);
  fp.dtype = p.dtype;
  fp.batch = p.batch;
  fp.seqlen_q = p.seqlen_q;
  fp.seqlen_k = p.seqlen_k;
  fp.heads_q = p.heads_q;
  fp.heads_kv = p.heads_kv;
  fp.head_dim = p.head_dim;
  fp.head_dim_v = p.head_dim_v;
  // BSHD strides of a tensor of `rows` rows a batch entry (a page, when paged), h heads of dim columns.
  auto bshd = [](int64_t rows, int64_t h, int64_t dim, int64_t* sb, int64_t* ss, int64_t* sh) {
    *sh = dim;
    *ss = h * dim;
    *sb = rows * h * dim;
  };
  const int64_t kv_rows = p.paged ? p.page_size : p.seqlen_k;
  fp.q = reinterpret_cast<const void*>(b.q);
  bshd(p.seqlen_q, p.heads_q, p.head_dim, &fp.q_stride_batch, &fp.q_stride_seq, &fp.q_stride_head);
  fp.k = reinterpret_cast<const void*>(b.k);
  bshd(kv_rows, p.heads_kv, p.head_dim, &fp.k_stride_batch, &fp.k_stride_seq, &fp.k_stride_head);
  if (l.v_in_k) {  // MLA's latent cache: the same pointer and strides as k
    fp.v = fp.k;
    fp.v_stride_batch = fp.k_stride_batch;
    fp.v_stride_seq = fp.k_stride_seq;
    fp.v_stride_head = fp.k_stride_head;
  } else {
    fp.v = reinterpret_cast<const void*>(b.v);
    bshd(kv_rows, p.heads_kv, p.head_dim_v, &fp.v_stride_batch, &fp.v_stride_seq, &fp.v_stride_head);
  }
  fp.o = reinterpret_cast<void*>(b.o);
  bshd(p.seqlen_q, p.heads_q, p.head_dim_v, &fp.o_stride_batch, &fp.o_stride_seq, &fp.o_stride_head);
  fp.lse = reinterpret_cast<float*>(b.lse);
  fp.mask = p.mask;
  fp.window_left = p.win_left;
  fp.window_right = p.win_right;
  if (l.bias != 0) {  // [seqlen_q, seqlen_k], broadcast over batch and heads
    fp.bias = reinterpret_cast<const void*>(b.bias);
    fp.bias_stride_q = p.seqlen_k;
    fp.bias_stride_k = 1;
  }
  if (l.alibi != 0) fp.alibi_slopes = reinterpret_cast<const float*>(b.alibi);
  if (l.sinks != 0) fp.sinks = reinterpret_cast<const float*>(b.sinks);
  fp.softcap = p.has_softcap ? softcap : 0.0f;
  if (l.seqused != 0) fp.seqused_k = reinterpret_cast<const int32_t*>(b.seqused);
  if (l.block_table != 0) {
    fp.block_table = reinterpret_cast<const int32_t*>(b.block_table);
    fp.block_table_stride = l.pages_per_seq;
    fp.page_size = p.page_size;
    fp.num_pages = l.num_pages;
  }
  fp.num_splits = p.num_splits;
  return fp;
}

std::vector<float> sinks_contents(const ProblemLayout& l) {
  std::vector<float> s(l.sinks);
  for (size_t h = 0; h < s.size(); ++h) s[h] = static_cast<float>(h % 5) - 1.0f;  // -1 .. 3
  return s;
}

std::vector<int32_t> block_table_contents(const ProblemLayout& l, unsigned seed) {
  std::vector<int32_t> t(l.block_table);
  std::iota(t.begin(), t.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

}  // namespace fa::tune
