// test_bwd_cta_order.cpp -- the backward kernel's CTA-to-work map (templates/bwd_mma_tiling.cuh: fa_bwd_cta,
// fa_bwd_lpt_tail, fa_div_magic): division by multiplication exact over its stated range, a bijection of the grid
// onto (key block, kv head, batch) for every tail, the plain order at tail 0 and before the tail, key-block-major
// (heaviest causal block first) over the tail pairs, every key block of a pair after its lower ones (the
// deterministic mode's dQ' order), and a tail of the size asked for, or none where the decode's ranges end.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "templates/bwd_mma_tiling.cuh"

namespace {

TEST(BwdCtaOrder, DivisionByMagicIsExact) {
  std::vector<unsigned> ds;
  for (unsigned d = 1; d <= 600; ++d) ds.push_back(d);
  for (unsigned d : {1000u, 4095u, 4096u, 4097u, 12345u, 32767u}) ds.push_back(d);
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) ds.push_back(std::uniform_int_distribution<unsigned>(601, 32767)(rng));
  for (unsigned d : ds) {
    const unsigned m = fa_div_magic(d);
    for (unsigned n = 0; n < (1u << 16); ++n) ASSERT_EQ(fa_div_by_magic(n, m), n / d) << n << " / " << d;
  }
}

TEST(BwdCtaOrder, BijectionPlainHeadAndKeyBlockMajorTail) {
  std::mt19937 rng(0x5eed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 400; ++trial) {
    const int nbk = pick(1, 40), heads = pick(1, 12), batches = pick(1, 6), pairs = heads * batches;
    const int tail = pick(0, pairs);
    const unsigned mt = tail > 0 ? fa_div_magic(tail) : 0, mh = fa_div_magic(heads);
    std::vector<int> seen(nbk * pairs, -1);
    std::vector<int> last_nb(pairs, -1);  // key blocks of a pair come in increasing order of lin
    for (int lin = 0; lin < nbk * pairs; ++lin) {
      const unsigned x = lin % nbk, y = (lin / nbk) % heads, z = lin / nbk / heads;  // CTAs start in this order
      const FaBwdCta c = fa_bwd_cta(x, y, z, nbk, heads, batches, tail, mt, mh);
      ASSERT_GE(c.nb, 0);
      ASSERT_LT(c.nb, nbk);
      ASSERT_GE(c.g, 0);
      ASSERT_LT(c.g, heads);
      ASSERT_GE(c.b, 0);
      ASSERT_LT(c.b, batches);
      const int pair = c.g + heads * c.b;
      int& s = seen[pair * nbk + c.nb];
      ASSERT_EQ(s, -1) << "lin " << lin << " repeats (nb " << c.nb << ", pair " << pair << ")";
      s = lin;
      ASSERT_EQ(c.nb, last_nb[pair] + 1) << "pair " << pair << " skips or reorders key blocks at lin " << lin;
      last_nb[pair] = c.nb;
      if (pair < pairs - tail) {  // plain: the block index itself
        EXPECT_EQ(c.nb, int(x));
        EXPECT_EQ(c.g, int(y));
        EXPECT_EQ(c.b, int(z));
      } else {  // tail: block 0 of every tail pair first, then block 1, ...
        EXPECT_EQ(lin, (pairs - tail) * nbk + c.nb * tail + (pair - (pairs - tail)));
      }
    }
    for (int p = 0; p < pairs; ++p) EXPECT_EQ(last_nb[p], nbk - 1);
  }
}

TEST(BwdCtaOrder, TailSize) {
  // One wave or less, a single key block, no slots: nothing to reorder.
  EXPECT_EQ(fa_bwd_lpt_tail(16, 1, 8, 132, 2), 0);
  EXPECT_EQ(fa_bwd_lpt_tail(16, 32, 1, 132, 2), 0);
  EXPECT_EQ(fa_bwd_lpt_tail(16, 32, 16, 0, 2), 0);
  // H100, 2k causal, block_n 128: 16 heads x 8 batches of 16 key blocks; two waves of 132 CTAs -> 17 pairs.
  EXPECT_EQ(fa_bwd_lpt_tail(16, 8, 16, 132, 2), 17);
  // Capped at the pair count.
  EXPECT_EQ(fa_bwd_lpt_tail(5, 2, 16, 132, 2), 10);
  // A mask_mod's grid: every pair key-block-major (8k, 16 heads x 2 batches of 64 key blocks), still nothing for one
  // wave and still the plain order outside the decode's ranges.
  EXPECT_EQ(fa_bwd_lpt_tail(16, 2, 64, 132, 2, true), 32);
  EXPECT_EQ(fa_bwd_lpt_tail(16, 1, 8, 132, 2, true), 0);
  EXPECT_EQ(fa_bwd_lpt_tail(32, 64, 64, 132, 2, true), 0);  // 131072 tail CTAs
  // Outside the decode's ranges: the plain order.
  EXPECT_EQ(fa_bwd_lpt_tail(8, 8192, 4, 132, 2), 0);   // 65536 pairs
  EXPECT_EQ(fa_bwd_lpt_tail(32768, 1, 4, 132, 2), 0);  // heads >= 2^15
  EXPECT_EQ(fa_bwd_lpt_tail(4, 4, 70000, 132, 2), 0);  // tail CTAs >= 2^16
  // The tail covers at least `waves` waves of CTAs when it can, and not a pair more.
  for (int nbk = 2; nbk < 200; nbk += 7)
    for (int slots : {84, 108, 132, 264}) {
      const int t = fa_bwd_lpt_tail(8, 125, nbk, slots, 2);
      EXPECT_GE(t * nbk, 2 * slots);
      EXPECT_LT((t - 1) * nbk, 2 * slots);
    }
}

}  // namespace
