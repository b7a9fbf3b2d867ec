// params_support.h -- fake forward problems for the CPU tests of validation and selection: well-aligned device
// addresses that are never dereferenced, dense BSHD strides.
#pragma once

#include <cstdint>

#include "fa/fa.h"
#include "generator/problem.h"
#include "runtime/validate.h"

namespace fa::test {

// A fake, well-aligned device address: validation and selection never dereference it.
inline void* fake_addr(uintptr_t x) { return reinterpret_cast<void*>(x); }

// fa_params_init, then a bf16 problem of batch x seqlen x heads x head_dim with q / k / v / o at distinct fake
// addresses in dense BSHD layouts ([batch, seqlen, heads, dim], strides in elements).
inline void fake_bshd_params(fa_params* p, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv,
                             int head_dim) {
  fa_params_init(p);
  p->dtype = FA_DTYPE_BF16;
  p->batch = batch;
  p->seqlen_q = seqlen_q;
  p->seqlen_k = seqlen_k;
  p->heads_q = heads_q;
  p->heads_kv = heads_kv;
  p->head_dim = head_dim;
  const int64_t D = head_dim;
  p->q = fake_addr(0x10000000);
  p->q_stride_batch = seqlen_q * heads_q * D;
  p->q_stride_seq = heads_q * D;
  p->q_stride_head = D;
  p->k = fake_addr(0x20000000);
  p->k_stride_batch = seqlen_k * heads_kv * D;
  p->k_stride_seq = heads_kv * D;
  p->k_stride_head = D;
  p->v = fake_addr(0x30000000);
  p->v_stride_batch = seqlen_k * heads_kv * D;
  p->v_stride_seq = heads_kv * D;
  p->v_stride_head = D;
  p->o = fake_addr(0x40000000);
  p->o_stride_batch = seqlen_q * heads_q * D;
  p->o_stride_seq = heads_q * D;
  p->o_stride_head = D;
}

// fake_bshd_params, then a decode problem against a paged cache: batch 2, one query token, 8 query heads over 2 KV
// heads, d 64, pages of 16 rows, capacity 80 keys (5 pages per sequence), a pool of 12 pages, used lengths.
inline void fake_paged_decode_params(fa_params* p) {
  fake_bshd_params(p, 2, 1, 80, 8, 2, 64);
  p->k_stride_batch = p->v_stride_batch = 16 * 2 * 64;  // paged: the batch stride is the page stride
  p->seqused_k = static_cast<const int32_t*>(fake_addr(0x50000000));
  p->block_table = static_cast<const int32_t*>(fake_addr(0x60000000));
  p->block_table_stride = 5;
  p->page_size = 16;
  p->num_pages = 12;
}

// The problem description validate_forward makes of p (a test failure when p does not validate).
inline fa::gen::ProblemDesc validated_desc(const fa_params& p) {
  fa_params out;
  fa::gen::ProblemDesc d;
  const fa::rt::Status st = fa::rt::validate_forward(&p, &out, &d);
  EXPECT_TRUE(st.ok()) << st.message;
  return d;
}

// fa_bwd_params_init, then b->fwd = fwd and dout / dq / dk / dv at distinct fake addresses in dense BSHD layouts of
// fwd's dims (head_dim wide; fwd's seqlen_q for dout / dq, seqlen_k for dk / dv).
inline void fake_bwd_params(fa_bwd_params* b, const fa_params* fwd) {
  fa_bwd_params_init(b);
  b->fwd = fwd;
  const int64_t D = fwd->head_dim, hq = fwd->heads_q, hk = fwd->heads_kv;
  b->dout = fake_addr(0x90000000);
  b->dq = fake_addr(0xa0000000);
  b->dout_stride_batch = b->dq_stride_batch = fwd->seqlen_q * hq * D;
  b->dout_stride_seq = b->dq_stride_seq = hq * D;
  b->dout_stride_head = b->dq_stride_head = D;
  b->dk = fake_addr(0xb0000000);
  b->dv = fake_addr(0xc0000000);
  b->dk_stride_batch = b->dv_stride_batch = fwd->seqlen_k * hk * D;
  b->dk_stride_seq = b->dv_stride_seq = hk * D;
  b->dk_stride_head = b->dv_stride_head = D;
}

}  // namespace fa::test
