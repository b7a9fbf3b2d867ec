// bucket.h -- the tuning key of a problem: which tuned entry a run of given lengths is served by.
//
// Sequence lengths and batch never enter a compile key (they are kernel arguments). Tuning results do depend on
// them, so a tuned entry is keyed by power-of-two buckets of (seqlen_q, seqlen_k, batch * heads_q): every length in
// (2^(k-1), 2^k] maps to bucket 2^k, so a new length in a known bucket costs no tuning. The semantic part of the key
// is fa::gen::semantic_key with even_k cleared (even_k depends on seqlen_k and block_n, i.e. on the candidate).
#pragma once

#include <string>
#include <vector>

#include "generator/config.h"
#include "generator/problem.h"

namespace fa::tune {

// The smallest power of two >= n (1 for n <= 1; 0 for n <= 0).
long long pow2_ceil(long long n);
// "q1024.k1024.bh512" -- the shape bucket of a problem (varlen: the maxima and batch).
std::string shape_bucket(const gen::ProblemDesc& p);
// semantic_key with even_k cleared and has_lse set: one tuned entry serves a shape class of either kind and a call
// with or without the LSE output (fa-tune and the backward's forward tune with LSE, an inference forward runs
// without; the LSE store at the tile's end does not move the winner, and a stored winner is re-checked against the
// call's own semantic before it is used).
std::string tuning_semantic_key(const gen::Semantic& s);
// Key counts in p's seqlen_k bucket that meet every shape class a kernel can have there: a kernel's class is whether
// seqlen_k is a multiple of its block_n, so the list holds the bucket's top and top - 64 / 32 / 16 / 1 (multiples of
// 128 / of 64 not 128 / of 32 not 64 / of 16 not 32 / odd: every pattern of the power-of-two tiles) and the largest
// multiple in the bucket of every block_n a registered family can take (80, 160, 176, ...: a power-of-two length
// reaches none of their multiples), each once (varlen: p's own length only; it has one class).
std::vector<int> bucket_class_lengths(const gen::ProblemDesc& p);
// tuning_semantic_key + "|" + shape_bucket: the in-memory key of a tuned entry.
std::string tuning_key(const gen::Semantic& s, const gen::ProblemDesc& p);

}  // namespace fa::tune
