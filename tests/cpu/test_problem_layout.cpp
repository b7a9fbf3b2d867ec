// test_problem_layout.cpp -- the background tuner's private buffers (tuner/problem_layout.h) stand in for the call
// that queued the job: for calls a server makes (decode over contiguous and paged caches, used lengths, MLA's latent
// cache, forced splits, GQA / MQA, windows, softcap, speculative decode, prefill with a bias or ALiBi, sinks), the
// problem validated from the private parameters reaches the same family and tuning key as the caller's own, on sm_80
// and sm_90. (Before the layout, a paged call's job came back with the contiguous key and every paged key failed.)
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "generator/family.h"
#include "params_support.h"
#include "runtime/validate.h"
#include "tuner/bucket.h"
#include "tuner/problem_layout.h"

using namespace fa;

namespace {

struct CallCase {
  std::string name;
  std::function<void(fa_params*)> make;  // the caller's parameters (fake addresses)
};

// A caller's paged cache: a pool larger than the batch needs, block-table rows longer than the sequence.
void page(fa_params* p, int page_size) {
  const int64_t D = p->head_dim, Dv = p->head_dim_v > 0 ? p->head_dim_v : p->head_dim;
  const int pages = (p->seqlen_k + page_size - 1) / page_size;
  p->block_table = reinterpret_cast<const int32_t*>(test::fake_addr(0x50000000));
  p->block_table_stride = pages + 3;
  p->page_size = page_size;
  p->num_pages = p->batch * pages + 17;
  p->k_stride_batch = page_size * p->heads_kv * D;
  p->v_stride_batch = p->v == p->k ? p->k_stride_batch : page_size * p->heads_kv * Dv;
}

void used(fa_params* p) { p->seqused_k = reinterpret_cast<const int32_t*>(test::fake_addr(0x60000000)); }

// MLA: one latent head of 576 columns, values its first 512.
void mla(fa_params* p, int heads_q, int seqlen_q, int seqlen_k) {
  test::fake_bshd_params(p, 4, seqlen_q, seqlen_k, heads_q, 1, 576);
  p->head_dim_v = 512;
  p->v = p->k;
  p->v_stride_batch = p->k_stride_batch;
  p->v_stride_seq = p->k_stride_seq;
  p->v_stride_head = p->k_stride_head;
  p->o_stride_batch = int64_t(seqlen_q) * heads_q * 512;
  p->o_stride_seq = int64_t(heads_q) * 512;
  p->o_stride_head = 512;
}

std::vector<CallCase> calls() {
  auto decode = [](int batch, int sq, int sk, int hq, int hk, int d) {
    return [=](fa_params* p) { test::fake_bshd_params(p, batch, sq, sk, hq, hk, d); };
  };
  std::vector<CallCase> out = {
      {"decode contiguous", decode(8, 1, 4096, 32, 8, 128)},
      {"decode used lengths",
       [&](fa_params* p) {
         decode(8, 1, 4096, 32, 8, 128)(p);
         used(p);
       }},
      {"MQA decode", decode(4, 1, 8192, 16, 1, 128)},
      {"speculative decode", decode(4, 4, 2048, 32, 8, 128)},
      {"forced splits",
       [&](fa_params* p) {
         decode(2, 1, 16384, 8, 8, 128)(p);
         p->num_splits = 4;
       }},
      {"decode softcap",
       [&](fa_params* p) {
         decode(8, 1, 4096, 16, 8, 256)(p);
         p->softcap = 50.0f;
       }},
      {"decode window",
       [&](fa_params* p) {
         decode(8, 1, 4096, 32, 8, 128)(p);
         p->mask = FA_MASK_SLIDING_WINDOW;
         p->window_left = 1024;
         p->window_right = 0;
       }},
      {"MLA contiguous", [](fa_params* p) { mla(p, 128, 1, 4096); }},
      {"MLA 16 heads, 2 queries", [](fa_params* p) { mla(p, 16, 2, 8192); }},
      {"MLA paged",
       [](fa_params* p) {
         mla(p, 128, 1, 4096);
         page(p, 64);
       }},
      {"prefill causal",
       [&](fa_params* p) {
         decode(2, 2048, 2048, 16, 16, 128)(p);
         p->mask = FA_MASK_CAUSAL;
       }},
      {"prefill ALiBi",
       [&](fa_params* p) {
         decode(2, 1024, 1024, 8, 8, 64)(p);
         p->alibi_slopes = reinterpret_cast<const float*>(test::fake_addr(0x70000000));
       }},
  };
  for (int ps : {1, 16, 64, 256, 512}) {
    out.push_back({"paged " + std::to_string(ps), [=](fa_params* p) {
                     decode(8, 1, 4096, 32, 8, 128)(p);
                     page(p, ps);
                   }});
    out.push_back({"paged used " + std::to_string(ps), [=](fa_params* p) {
                     decode(8, 1, 2000, 32, 4, 128)(p);
                     page(p, ps);
                     used(p);
                   }});
  }
  out.push_back({"paged MQA speculative", [&](fa_params* p) {
                   decode(4, 3, 4096, 16, 1, 64)(p);
                   page(p, 128);
                 }});
  const float* sinks = reinterpret_cast<const float*>(test::fake_addr(0x78000000));
  out.push_back({"sinks paged decode", [=](fa_params* p) {  // gpt-oss decode
                   decode(8, 1, 4096, 64, 8, 64)(p);
                   page(p, 16);
                   used(p);
                   p->sinks = sinks;
                 }});
  out.push_back({"sinks prefill window", [=](fa_params* p) {
                   decode(2, 2048, 2048, 64, 8, 64)(p);
                   p->mask = FA_MASK_SLIDING_WINDOW;
                   p->window_left = 127;
                   p->window_right = 0;
                   p->sinks = sinks;
                 }});
  out.push_back({"sinks MLA", [=](fa_params* p) {
                   mla(p, 128, 1, 4096);
                   p->sinks = sinks;
                 }});
  return out;
}

// The addresses of a layout's buffers, 1 GiB apart (never dereferenced).
tune::ProblemBuffers fake_buffers(const tune::ProblemLayout& l) {
  tune::ProblemBuffers b;
  CUdeviceptr next = CUdeviceptr{1} << 32;
  for (CUdeviceptr* p : {&b.q, &b.k, &b.v, &b.o, &b.lse, &b.bias, &b.alibi, &b.seqused, &b.block_table, &b.sinks}) {
    *p = next;
    next += CUdeviceptr{1} << 30;
  }
  if (l.v == 0) b.v = 0;
  return b;
}

}  // namespace

TEST(ProblemLayout, PrivateBuffersReachTheCallersTuningKey) {
  for (int arch : {80, 90}) {
    for (const CallCase& cc : calls()) {
      SCOPED_TRACE(cc.name + " on sm_" + std::to_string(arch));
      fa_params call, vp;
      cc.make(&call);
      call.lse = reinterpret_cast<float*>(test::fake_addr(0x80000000));
      gen::ProblemDesc job;
      ASSERT_EQ(rt::validate_forward(&call, &vp, &job).code, FA_OK);
      job.sm_count = 132;
      const gen::Semantic want = gen::select_forward(job, arch);
      ASSERT_NE(want.family, nullptr);

      const tune::ProblemLayout l = tune::problem_layout(job);
      const fa_params mine = tune::problem_params(job, 30.0f, l, fake_buffers(l));
      gen::ProblemDesc got;
      const rt::Status st = rt::validate_forward(&mine, &vp, &got);
      ASSERT_TRUE(st.ok()) << st.message;
      got.sm_count = job.sm_count;
      const gen::Semantic s = gen::select_forward(got, arch);
      ASSERT_NE(s.family, nullptr);
      EXPECT_STREQ(s.family->name, want.family->name);
      EXPECT_EQ(tune::tuning_key(s, got), tune::tuning_key(want, job));
      EXPECT_EQ(got.paged, job.paged);
      EXPECT_EQ(got.page_size, job.page_size);
      EXPECT_EQ(got.seqused, job.seqused);
      EXPECT_EQ(got.v_in_k, job.v_in_k);
      EXPECT_EQ(got.num_splits, job.num_splits);
      EXPECT_EQ(got.has_sinks, job.has_sinks);
      EXPECT_EQ(mine.sinks != nullptr, call.sinks != nullptr);
      // The same launches: the plan (split count and workspace included) of the caller's problem.
      EXPECT_EQ(gen::make_plan(s, got).reported_workspace(), gen::make_plan(want, job).reported_workspace());
    }
  }
}

TEST(ProblemLayout, BlockTableIsAPermutationOfThePool) {
  gen::ProblemDesc p;
  p.batch = 3;
  p.seqlen_q = 1;
  p.seqlen_k = 1000;
  p.paged = true;
  p.page_size = 64;
  const tune::ProblemLayout l = tune::problem_layout(p);
  ASSERT_EQ(l.pages_per_seq, 16);
  ASSERT_EQ(l.num_pages, 48);
  std::vector<int32_t> t = tune::block_table_contents(l, 5);
  ASSERT_EQ(t.size(), 48u);
  EXPECT_NE(t, tune::block_table_contents(l, 6));  // scattered, seed by seed
  std::sort(t.begin(), t.end());
  for (int i = 0; i < 48; ++i) EXPECT_EQ(t[static_cast<size_t>(i)], i);
}
