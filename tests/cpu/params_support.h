// params_support.h -- fake forward problems for the CPU tests of validation and selection: well-aligned device
// addresses that are never dereferenced, dense BSHD strides.
#pragma once

#include <cstdint>

#include "fa/fa.h"

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

}  // namespace fa::test
