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

std::string tuning_semantic_key(const gen::Semantic& s) {
  gen::Semantic c = s;
  c.even_k = false;
  return gen::semantic_key(c);
}

std::string tuning_key(const gen::Semantic& s, const gen::ProblemDesc& p) {
  return tuning_semantic_key(s) + "|" + shape_bucket(p);
}

}  // namespace fa::tune
