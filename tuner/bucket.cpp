// bucket.cpp -- power-of-two shape buckets and the tuning key (see bucket.h).
#include "tuner/bucket.h"

#include <fmt/format.h>

namespace fa::tune {

long long pow2_ceil(long long n) {
  if (n <= 0) return 0;
  long long p = 1;
  while (p < n) p <<= 1;
  return p;
}

std::string shape_bucket(const gen::ProblemDesc& p) {
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  return fmt::format("q{}.k{}.bh{}", pow2_ceil(p.seqlen_q), pow2_ceil(p.seqlen_k), pow2_ceil(bh));
}

std::vector<int> bucket_class_lengths(const gen::ProblemDesc& p) {
  if (p.varlen) return {p.seqlen_k};
  const int top = static_cast<int>(pow2_ceil(p.seqlen_k));
  std::vector<int> out;
  for (int back : {0, 64, 32, 16, 1})
    if (top - back > top / 2 && top - back > 0) out.push_back(top - back);
  if (out.empty()) out.push_back(p.seqlen_k);
  return out;
}

std::string tuning_semantic_key(const gen::Semantic& s) {
  gen::Semantic c = s;
  c.even_k = false;
  c.has_lse = true;
  return gen::semantic_key(c);
}

std::string tuning_key(const gen::Semantic& s, const gen::ProblemDesc& p) {
  return tuning_semantic_key(s) + "|" + shape_bucket(p);
}

}  // namespace fa::tune
