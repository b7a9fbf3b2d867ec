// problem_layout.h -- the private buffers of a timing problem (fa-tune's grid points, the background tuner's jobs)
// and the fa_params over them, as pure host code: the buffers reproduce every feature of the problem's key (a paged
// pool with its block table, used lengths, MLA's values inside the keys, a forced split count), so that the problem
// validated from them reaches the tuning key of the call it stands for. A CPU test checks that for every decode
// feature; tuner/device_problem.* allocates and fills what it lays out.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fa/fa.h"
#include "generator/problem.h"

namespace fa::tune {

struct ProblemLayout {
  // Elements of each buffer (bias in the problem's dtype; alibi, sinks float; seqused / block table int32); 0: none.
  size_t q = 0, k = 0, v = 0, o = 0, lse = 0, bias = 0, alibi = 0, seqused = 0, block_table = 0, sinks = 0;
  int pages_per_seq = 0, num_pages = 0;  // paged: the block table's row length and the pool's pages
  bool v_in_k = false;                   // v is k's first head_dim_v columns: no buffer of its own
};

// The device addresses of the buffers of a layout (0 where the layout has none).
struct ProblemBuffers {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0, bias = 0, alibi = 0, seqused = 0, block_table = 0, sinks = 0;
};

ProblemLayout problem_layout(const gen::ProblemDesc& p);

// The forward parameters of p over buffers b laid out by l: BSHD tensors, k / v as pools of pages when paged, the
// LSE output, softcap (0 unless p has one), the caller's mask, window and split count, sinks when p has them.
fa_params problem_params(const gen::ProblemDesc& p, float softcap, const ProblemLayout& l, const ProblemBuffers& b);

// The sinks of a timing problem: one logit per query head, around the scores' scale (they change no timing, only
// the results the winner's check compares).
std::vector<float> sinks_contents(const ProblemLayout& l);

// The block table: every sequence's pages, a permutation of the pool (seeded), so that the timed kernel reads
// scattered pages as a server's cache does.
std::vector<int32_t> block_table_contents(const ProblemLayout& l, unsigned seed);

}  // namespace fa::tune
