// bucket.cpp -- power-of-two shape buckets and the tuning key (see bucket.h).
#include "tuner/bucket.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "generator/family.h"

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

namespace {

// Every value of a registered family's block_n knob.
const std::vector<int>& block_sizes() {
  static const std::vector<int> sizes = [] {
    std::set<int> s;
    for (const gen::Family* f : gen::all_families())
      for (const gen::Knob& k : f->knobs)
        if (std::strcmp(k.name, "block_n") == 0) s.insert(k.values.begin(), k.values.end());
    return std::vector<int>(s.begin(), s.end());
  }();
  return sizes;
}

}  // namespace

std::vector<int> bucket_class_lengths(const gen::ProblemDesc& p) {
  if (p.varlen) return {p.seqlen_k};
  const int top = static_cast<int>(pow2_ceil(p.seqlen_k));
  std::vector<int> out;
  auto add = [&](int len) {
    if (len > top / 2 && len > 0 && std::find(out.begin(), out.end(), len) == out.end()) out.push_back(len);
  };
  for (int back : {0, 64, 32, 16, 1}) add(top - back);
  for (int n : block_sizes())
    if (n > 0) add(top / n * n);  // the largest multiple of n in the bucket (none when n > top)
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
