// fwd_wgmma -- host side of the Hopper forward (templates/fwd_wgmma.cuh), sm_90a, fp16/bf16 and fp8 (e4m3 / e5m2 q,
// k, v with descales, o bf16 / fp16; fp8 rules: valid_fp8, defaults_fp8, space_fp8 below): TMA loads of Q, K, V
// into 128-byte-swizzled shared memory (a producer warp), wgmma GEMMs and the online softmax in 1-3 consumer
// warpgroups (ping-pong, intra-warpgroup overlap), optional persistent tile loop. Chosen before fwd_mma on sm_90
// wherever q, k and v can be described as TMA tensors (ProblemDesc::tma_ok), with or without user code (fa_mods);
// elsewhere fwd_mma serves.
//
// Knobs: consumers in {1, 2, 3} (block_m = 64 * consumers, rendered as kBlockM), block_n in 64..256 step 16,
// stages in {2, 3, 4} (K/V ring depth), ping_pong (2+ consumers take turns issuing their GEMMs), intra_overlap (the
// softmax of block j under Q K^T of block j+1), persistent (grid = min(tiles, SMs), a tile loop with a
// double-buffered Q where it fits).
// Binding: FaFwdArgs, FaUser (only with user code, fa_mods), then FaFwdTma (templates/fa_tma_args.cuh): three 4D
// tensor maps (head_dim, seq, heads, batch), box (64, block rows, 1, 1), 128-byte swizzle, zero fill past the tensor
// (head dims pad to 64 columns). Plan: with a mask_mod, [mask_blocks, fwd_wgmma] (block skipping; plan() below).
// Validity: shared memory within 227 KB and the points ptxas compiles without spills (NVRTC 13 `-Xptxas -v` over
// the space, H200 session of 2026-11-25, causal bf16; features checked in the CPU compile sweep):
//   head dims padded to 64:  1-2 consumers: block_n <= 240 (2-3 stages), <= 208 (4); 3 consumers: <= 128
//   padded to 128:           1-2 consumers: <= 192 (2 stages), <= 128 (3), <= 96 (4); 3 consumers: <= 80
//   padded to 192 or 256:    1 consumer: <= 96 (2), <= 64 (3); 2 consumers: <= 80 (2 stages only); 3: none
// ALiBi / softcap / bias hold more registers: 3 consumers are out with them (fp16 d 64 spilled 80 bytes), block_n
// is held to 128 (64 at head dims padded past 128); a bias also holds block_n to 64 at head dims padded to 128+ and
// excludes the persistent loop; the persistent loop holds block_n to 176 (CPU compile sweeps), 112 at 1 consumer with
// ALiBi / softcap. A score_mod counts as a feature and holds block_n to 64; a mask_mod alone keeps the plain rules
// (its code runs in rolled loops) except with the persistent loop: 1 consumer holds block_n to 144 at head dims
// padded to 128 and is out past them, 3 consumers hold it to 96.
#include <fmt/format.h>

#include "../common.h"
#include "templates/fa_args.cuh"
#include "templates/fa_tma_args.cuh"

namespace fa::gen {

namespace {

enum { kConsumers, kBlockN, kStages, kPingPong, kIntraOverlap, kPersistent };

constexpr int kSmemLimit = 232448;  // 227 KB, the sm_90 opt-in maximum (the template's static_assert)

int pad64(int d) { return (d + 63) / 64 * 64; }
// A score_mod (fa_mods) runs per S element on the feature path, like the built-in score features.
bool score_code(const Semantic& s) { return has_score_mod(s.mods); }
bool features(const Semantic& s) { return s.has_bias || s.has_alibi || s.has_softcap || score_code(s); }
// A mask_mod: user code per element of the sub-tiles the mask cuts (block skipping).
bool mask_code(const Semantic& s) { return has_mask_mod(s.mods); }
// User code at head dims padded to 256 (either dim above 192) spilled 8-128 bytes at 84 of the valid points of a
// scan over d 16 / dv 248, d 128 / dv 256, d 200, d 256 with the compile sweep's heaviest mods (every feature mix,
// 1 and 2 consumers, persistent or not; none at d 136): the mma forward runs those problems.
constexpr int kMaxUserCodeDim = 192;
// A mask_mod beside a bias past 128 columns spilled 32 bytes (d 72 / dv 192, ALiBi and a score_mod too, 1 consumer,
// 64 keys: the sweep's random sample, 2026-11-25); the mma forward runs those problems too.
bool user_code_fits(int head_dim, int head_dim_v, bool has_mods, bool mask_mod_and_bias) {
  const int d = std::max(head_dim, head_dim_v);
  return !has_mods || (d <= kMaxUserCodeDim && !(mask_mod_and_bias && pad64(d) > 128));
}
// Head dims past 224 (d 248 / 256: 128 O accumulators a consumer thread) since O leaves through TMA stores (7fc0242):
// `fa_compile_sweep --full --match` over d 248 / 256 (2026-11-28) spilled 4-44 bytes at 2 consumers with a bias or
// ALiBi + softcap (64 keys, the only block_n features leave there; both ping-pong settings), at 1 consumer with a
// bias beside ALiBi (8-12 bytes), and at 1 persistent consumer over 80 keys, varlen (8 bytes); the bias points of
// the template before 7fc0242 compiled clean. Those problems: a bias or ALiBi + softcap on 1 consumer, a bias beside
// ALiBi on the mma forward, the persistent single consumer on 64 keys. (Softcap or ALiBi alone keep 2 consumers.)
constexpr int kWideDim = 224;
bool wide(int head_dim, int head_dim_v) { return std::max(head_dim, head_dim_v) > kWideDim; }
// A bias beside ALiBi there: no point fits (valid() refuses them all, covers() leaves the problem to fwd_mma).
bool bias_alibi_fits(int head_dim, int head_dim_v, bool has_bias, bool has_alibi) {
  return !(has_bias && has_alibi && wide(head_dim, head_dim_v));
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// The template's shared-memory formula (fwd_wgmma.cuh): Q (or O staging) tiles, the K/V ring (fp8: and the V^T ring
// with its barriers), the barriers, 1 KB of alignment slack; two Q tiles when persistent and they fit. Rows are 128
// bytes: 64 16-bit or 128 fp8 columns (head dims padded by TMA zero fill); O is staged 16-bit.
unsigned smem_bytes(const KernelConfig& c) {
  const bool fp8 = is_fp8(c.s.dtype);
  const int es = fp8 ? 1 : 2;
  const int dp = round_up(c.s.head_dim, 128 / es), dvp = round_up(c.s.head_dim_v, 128 / es);
  const int bm = 64 * c.t[kConsumers], bn = c.t[kBlockN], stages = c.t[kStages];
  const int r0 = std::max(bm * dp * es, bm * pad64(c.s.head_dim_v) * 2);
  // with a mask_mod, each stage also holds a partial block's hidden pairs (bm * 32 bytes) and record (16 bytes)
  const int masks = has_mask_mod(c.s.mods) ? bm * 32 + 16 : 0;
  // fp8: a V^T tile per stage (128-key chunks of head_dim_v rounded up to 32 rows) and its two barriers
  const int vt = fp8 ? round_up(bn, 128) * round_up(c.s.head_dim_v, 32) : 0;
  const int rest = stages * (bn * (dp + dvp) * es + vt + masks) + 8 * (4 + 4 * stages) + (fp8 ? 16 * stages : 0) + 1024;
  const int nq = c.t[kPersistent] != 0 && 2 * r0 + rest <= kSmemLimit ? 2 : 1;
  return static_cast<unsigned>(nq * r0 + rest);
}

// The largest spill-free block_n for (padded head dim, consumers, stages); 0: none.
int max_block_n(int dp, int consumers, int stages) {
  if (dp <= 64) return consumers == 3 ? 128 : stages == 4 ? 208 : 240;
  if (dp <= 128) return consumers == 3 ? 80 : stages == 2 ? 192 : stages == 3 ? 128 : 96;
  if (consumers == 1) return stages == 2 ? 96 : stages == 3 ? 64 : 0;
  if (consumers == 2) return stages == 2 ? 80 : 0;
  return 0;
}

bool fail(std::string* why, const std::string& msg) { return fam::fail(why, "fwd_wgmma", msg); }

// fp8: the largest spill-free block_n for the head dims and consumers (0: none), non-persistent. NVRTC 13
// `-Xptxas -v` over c 1-3 x block_n 64-256 (step 32) x persistent 0 / 1, 2 stages, at d 64 / 128 / 192-128 / 256,
// e4m3, with ALiBi + softcap + window + varlen and plain causal (2026-11-29):
//   max(d, dv) <= 64:  1-2 consumers <= 192 (224: 60-68 bytes); 3: 64, or 128 without ALiBi / softcap (96 and 160
//                      spilled 8 bytes; 128 with ALiBi + softcap 12 bytes, e5m2 causal: the CI sample)
//   <= 128:            1 consumer <= 128 (160: 4-32 bytes), 2 <= 160 (192: 84), 3 <= 64 (96: 20)
//   <= 192:            1 consumer <= 128, 2 whatever shared memory holds, 3 <= 64
//   <= 256:            1 consumer <= 96 (128: 108 bytes), 2 whatever shared memory holds, 3 none (ptxas C7602)
// The persistent loop spilled 4-36 bytes at almost every point with 2 or 3 consumers, features or not (values of
// the tile scheduler live across setmaxnreg into the transposer warps' 32-40 registers): fp8 runs non-persistent.
int max_block_n_fp8(const Semantic& s, const Tunables& t) {
  const int d = std::max(s.head_dim, s.head_dim_v), c = t[kConsumers];
  const bool feat = s.has_alibi || s.has_softcap;
  if (c == 3) return d <= 64 && t[kBlockN] == 128 && !feat ? 128 : d <= 192 ? 64 : 0;
  if (d <= 64) return 192;
  if (d <= 128) return c == 1 ? 128 : 160;
  if (d <= 192) return c == 1 ? 128 : 256;
  return c == 1 ? 96 : 256;
}

// fp8 q / k / v (templates/fwd_wgmma.cuh, "FP8"): 32-key steps, no bias or user code, and the spill-free points.
bool valid_fp8(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  if (s.o_dtype != kBf16 && s.o_dtype != kFp16) return fail(why, "fp8 inputs need o_dtype bf16 or fp16");
  if (s.has_bias || s.mods != nullptr) return fail(why, "fp8: no bias and no user code");
  if (s.has_sinks) return fail(why, "fp8: no attention sinks (not yet built and tested together)");
  if (s.head_dim > kMaxHeadDimFast || s.head_dim_v > kMaxHeadDimFast)
    return fail(why, "head dims up to " + std::to_string(kMaxHeadDimFast));
  if (t[kBlockN] % 32 != 0)
    return fail(why, fmt::format("fp8: block_n a multiple of 32 (k32 steps), got {}", t[kBlockN]));
  if (t[kPingPong] != 0 && t[kConsumers] < 2) return fail(why, "ping_pong needs 2 or 3 consumers");
  if (t[kPersistent] != 0) return fail(why, "fp8: persistent tile loops spill (ptxas; see max_block_n_fp8)");
  const int limit = max_block_n_fp8(s, t);
  if (t[kBlockN] > limit)
    return fail(why, fmt::format("fp8 registers: block_n {} with {} consumers at head dims {} / {} spills (ptxas); "
                                 "expected <= {}",
                                 t[kBlockN], t[kConsumers], s.head_dim, s.head_dim_v, limit));
  return true;
}

bool valid(const KernelConfig& c, std::string* why) {
  const Semantic& s = c.s;
  const Tunables& t = c.t;
  if (is_fp8(s.dtype)) return valid_fp8(c, why);
  if (s.dtype != kFp16 && s.dtype != kBf16) return fail(why, "dtype must be fp16, bf16, e4m3 or e5m2");
  if (s.head_dim > kMaxHeadDimFast || s.head_dim_v > kMaxHeadDimFast)
    return fail(why, "head dims up to " + std::to_string(kMaxHeadDimFast));
  if (t[kPingPong] != 0 && t[kConsumers] < 2) return fail(why, "ping_pong needs 2 or 3 consumers");
  if (!bias_alibi_fits(s.head_dim, s.head_dim_v, s.has_bias, s.has_alibi))
    return fail(why, fmt::format("a bias beside ALiBi at head dims above {} spills (ptxas; covers() leaves it to the "
                                 "mma forward)",
                                 kWideDim));
  if (wide(s.head_dim, s.head_dim_v) && t[kConsumers] >= 2 && (s.has_bias || (s.has_alibi && s.has_softcap)))
    return fail(why, fmt::format("a bias, or ALiBi with softcap, at head dims above {} takes 1 consumer (ptxas spills "
                                 "with 2)",
                                 kWideDim));
  // persistent 2: the masked tile order in pairs of one cost, (batch, head)-major (templates/common/
  // hopper_tile_sched.cuh); unmasked problems have one persistent order, p1's
  if (t[kPersistent] == 2 && s.mask == 0 && !mask_code(s))
    return fail(why, "persistent 2 (the head-major masked order) needs a mask");
  if (!user_code_fits(s.head_dim, s.head_dim_v, s.mods != nullptr, mask_code(s) && s.has_bias))
    return fail(why, fmt::format("user code at head dims above {} (or a mask_mod with a bias past 128) spills (ptxas)",
                                 kMaxUserCodeDim));
  if (features(s) && t[kConsumers] == 3)
    return fail(why, "3 consumers with bias / ALiBi / softcap / score_mod spill (ptxas)");
  const int dp = std::max(pad64(s.head_dim), pad64(s.head_dim_v));
  // The bias path loads an element beside every S value: at head dims padded to 128 and more, 128-key blocks
  // spilled 8-16 bytes (with ALiBi, 2 consumers) and the persistent loop 20-48 bytes (d 200, 1 consumer, window).
  if (s.has_bias && t[kPersistent] != 0) return fail(why, "bias with the persistent tile loop spills (ptxas)");
  if (s.has_bias && dp >= 128 && t[kBlockN] > 64)
    return fail(why, fmt::format("bias at head dims padded to {}: block_n <= 64 (ptxas spills above)", dp));
  int limit = max_block_n(dp, t[kConsumers], t[kStages]);
  // ALiBi / softcap / bias and the persistent loop hold more registers beside the S tile: the full compile sweep
  // (`fa_compile_sweep --full --limit 800`, 2026-11-25) spilled 16-680 bytes with them at head dims padded to 64
  // and block_n 160-240, and 4 bytes at d 224 with 96 keys (ALiBi + softcap, 1 consumer) and at d 256 with 64 keys
  // and 3 stages (bias + ALiBi): past 128 columns, features take 64 keys and 2 stages.
  if (features(s)) limit = std::min(limit, dp <= 128 ? 128 : t[kStages] == 2 ? 64 : 0);
  if (t[kPersistent] != 0) limit = std::min(limit, 176);
  if (t[kPersistent] != 0 && t[kConsumers] == 1 && wide(s.head_dim, s.head_dim_v)) limit = std::min(limit, 64);
  // A score_mod's code runs per S element in the unrolled feature loop, where ptxas hoists every element's loads:
  // python's relative_bias (a float table read per element) spilled 8-108 bytes with 96-160 keys at d 64 / 128
  // (1-2 consumers; `-Xptxas -v`, 2026-11-25) and none with 64 keys. A mask_mod runs in a rolled loop
  // (common/fwd_score.cuh) and keeps the rules above.
  if (score_code(s)) limit = std::min(limit, 64);
  // The persistent loop's tile state beside the sub-tile mask of a mask_mod (common/fwd_score.cuh), and beside
  // ALiBi / softcap: a scan of the persistent points (dp 64 / 128 / 192, every consumer count, block_n 64-176,
  // 2-3 stages, the compile sweep's document mask alone and with its relative bias, causal or not; `-Xptxas -v`,
  // 2026-11-25) spilled 8-88 bytes at 1 consumer with block_n 176 at dp 128 and with any block_n past 128 columns,
  // and at 3 consumers with block_n 128 and a built-in mask (the random full sweep: also at d 56 without one, 28
  // bytes); the random full sweep found ALiBi + softcap at d 112 (window, 1 consumer, block_n 128) spilling 20 bytes.
  if (t[kPersistent] != 0 && mask_code(s)) {
    if (t[kConsumers] == 1) limit = std::min(limit, dp <= 128 ? 144 : 0);
    if (t[kConsumers] == 3) limit = std::min(limit, 96);
  }
  // 1 consumer, persistent, with ALiBi / softcap: past 128 padded columns (d 32 / dv 232, d 8-128 / dv 256 with a
  // window; the full sweep's random sample, 2026-11-25, and a scan with `-Xptxas -v`) it spilled 8-28 bytes at the
  // only block_n features leave there (64).
  if (t[kPersistent] != 0 && t[kConsumers] == 1 && (s.has_alibi || s.has_softcap))
    limit = std::min(limit, dp <= 128 ? 112 : 0);
  if (t[kBlockN] > limit) {
    return fail(why, fmt::format("registers: block_n {} with {} consumers and {} stages at head dims padded to {} "
                                 "spills (ptxas); expected <= {}",
                                 t[kBlockN], t[kConsumers], t[kStages], dp, limit));
  }
  return true;
}

// fp8: FlashAttention 3's fp8 tiles as the starting point (not yet measured here): 3 consumers x 128 keys at head
// dims up to 64 (2 with ALiBi / softcap), 2 x 128 up to 128, 2 x 64 beyond (the V^T ring and 16-bit O staging fill
// shared memory); 2 stages, ping-pong and intra-warpgroup overlap on, not persistent.
Tunables defaults_fp8(const Semantic& s) {
  const int d = std::max(s.head_dim, s.head_dim_v);
  Tunables t = d <= 64    ? Tunables{{s.has_alibi || s.has_softcap ? 2 : 3, 128, 2, 1, 1, 0}}
               : d <= 128 ? Tunables{{2, 128, 2, 1, 1, 0}}
                          : Tunables{{2, 64, 2, 1, 1, 0}};
  if (!valid(KernelConfig{s, t}, nullptr)) t = Tunables{{1, 64, 2, 0, 1, 0}};
  return t;
}

// Measured best per head dim on an H200 (bf16, 16k tokens, hidden 2048, 2k-16k; the tuner refines per length):
// d 64: 3 consumers x 128 keys; d 128: 2 x 128 (2 x 176 from 8k); d 256: 2 x 80; always 2 stages, ping-pong and
// intra-warpgroup overlap on, not persistent (persistent wins only non-causal <= 4k at d 64 / 128). Built-in masks
// (after fa-tune's winners over 512-16k, session 20): d 64 takes 3 x 128 with 3 stages, persistent without
// ping-pong; 2 consumers up to 128 padded columns take the paired head-major order (persistent 2). Untuned bf16
// causal on an H200 against the points above: d 64 1.01-1.23x over 512-16k; d 128 1.03-1.17x over 512-8k, 0.97x at
// 16k. Score features and a mask_mod keep the points above.
Tunables defaults(const Semantic& s) {
  if (is_fp8(s.dtype)) return defaults_fp8(s);
  const int dp = std::max(pad64(s.head_dim), pad64(s.head_dim_v));
  Tunables t{{2, 128, 2, 1, 1, 0}};
  if (dp <= 64 && !features(s)) t = Tunables{{3, 128, 2, 1, 1, 0}};
  if (dp > 128) t = Tunables{{2, 80, 2, 1, 1, 0}};
  if ((s.has_bias && dp >= 128) || (features(s) && dp > 128) || score_code(s)) t[kBlockN] = 64;
  if (s.mask != 0 && !features(s) && !mask_code(s) && dp <= 128) {
    Tunables m = t;
    if (t[kConsumers] == 3) m = Tunables{{3, 128, 3, 0, 1, 1}};
    else if (t[kConsumers] == 2) m[kPersistent] = 2;
    if (valid(KernelConfig{s, m}, nullptr)) t = m;
  }
  if (!valid(KernelConfig{s, t}, nullptr)) t = Tunables{{1, 64, 2, 0, 1, 0}};
  return t;
}

// fp8: block_n in 32-key steps, 2-3 stages, every consumer count, ping-pong with 2+ consumers and without,
// intra-warpgroup overlap on, not persistent (valid_fp8).
std::vector<Tunables> space_fp8(const Semantic&) {
  std::vector<Tunables> out;
  for (int c : {1, 2, 3})
    for (int bn : {64, 96, 128, 160, 192, 224, 256})
      for (int st : {2, 3})
        for (int pp : {1, 0}) {
          if (pp == 1 && c < 2) continue;
          out.push_back(Tunables{{c, bn, st, pp, 1, 0}});
        }
  return out;
}

// The tuner's space: the knob values that won or came close in the H200 measurements (the tunables tests and the
// compile sweep cover every valid point of the knobs' product: gen::all_valid_points). Masked problems also try
// the persistent points of 2-3 consumers without ping-pong: at causal d 64, 512-4k tokens, 2 x 128 x 3 stages
// persistent ran 1.3-2.8% faster without it (docs/design_notes.md, issue 20, session 15). Built-in masks with 2-3
// consumers also try the paired, (batch, head)-major masked order (persistent 2: K / V stay in L2).
std::vector<Tunables> space(const Semantic& s) {
  if (is_fp8(s.dtype)) return space_fp8(s);
  std::vector<Tunables> out;
  for (int c : {1, 2, 3})
    for (int bn : {64, 80, 96, 112, 128, 144, 160, 176, 192})
      for (int st : {2, 3})
        for (int persistent : {0, 1, 2}) {
          if (persistent == 2 && (s.mask == 0 || c < 2)) continue;
          out.push_back(Tunables{{c, bn, st, c >= 2 ? 1 : 0, 1, persistent}});
          if (c >= 2 && persistent != 0 && s.mask != 0) out.push_back(Tunables{{c, bn, st, 0, 1, persistent}});
        }
  return out;
}

Launch launch(const KernelConfig& c, const LaunchShape& sh) {
  const int bm = 64 * c.t[kConsumers];
  Launch l = fam::rows_launch(sh.max_seqlen_q, bm, sh.heads_q, sh.batch, 4 * (c.t[kConsumers] + 1), smem_bytes(c));
  if (c.t[kPersistent] != 0) {
    const long long tiles = static_cast<long long>(l.grid[0]) * l.grid[1] * l.grid[2];
    const long long sms = sh.sm_count > 0 ? sh.sm_count : tiles;
    l.grid[0] = static_cast<unsigned>(tiles == 0 ? 0 : std::max(1LL, std::min(tiles, sms)));
    l.grid[1] = l.grid[2] = tiles == 0 ? 0u : 1u;
  }
  return l;
}

bool covers(const ProblemDesc& p, int, std::string* why) {
  if (is_fp8(p.dtype) && (p.has_bias || p.mods != nullptr || p.has_sinks))
    return fail(why, fmt::format("{} q / k / v with {} (the fp8 forward takes none of them)", dtype_name(p.dtype),
                                 p.has_bias    ? "a bias"
                                 : p.has_sinks ? "attention sinks"
                                               : "user code (fa_mods)"));
  if (p.dtype != kFp16 && p.dtype != kBf16 && !is_fp8(p.dtype))
    return fail(why, "dtype must be fp16, bf16, e4m3 or e5m2");
  if (!p.tma_ok)
    return fail(why, "q/k/v/o are not TMA tensors (16-byte aligned pointers and strides, positive strides)");
  if (!user_code_fits(p.head_dim, p.head_dim_v, p.mods != nullptr, has_mask_mod(p.mods) && p.has_bias))
    return fail(why, fmt::format("user code at head dims above {} or a mask_mod with a bias past 128 columns (the mma "
                                 "forward runs it)",
                                 kMaxUserCodeDim));
  if (!bias_alibi_fits(p.head_dim, p.head_dim_v, p.has_bias, p.has_alibi))
    return fail(why, fmt::format("a bias beside ALiBi at head dims above {} (ptxas spills; the mma forward runs it)",
                                 kWideDim));
  return fam::contiguous_kv_fast_dims(p, "fwd_wgmma", why);
}

// With a mask_mod (fa_mods): [mask_blocks at this block_m x block_n with sub-tile codes, fwd_wgmma] over the tile
// classes, which every warp walks itself (no visiting lists), and the sub-tile codes that limit user code to the
// 16-row x quarter-of-the-keys sub-tiles the mask cuts (common.h: BlockSkipping::sub); without: the plan of one.
Plan plan(const KernelConfig& main, const ProblemDesc& p) {
  const Family& f = *main.s.family;
  std::vector<int> block_ms;
  for (int c : f.knobs[kConsumers].values) block_ms.push_back(64 * c);
  return fam::block_sparse_plan(main, p,
                                fam::BlockSkipping{64 * main.t[kConsumers], main.t[kBlockN], block_ms,
                                                   f.knobs[kBlockN].values, false, false, true});
}

void finalize(KernelConfig* c, const ProblemDesc& p) {
  c->s.even_k = !p.varlen && c->t[kBlockN] > 0 && p.seqlen_k % c->t[kBlockN] == 0;
}

void render_constants(const KernelConfig& c, std::string* src) {
  *src += fmt::format("constexpr int kBlockM = {};\n", 64 * c.t[kConsumers]);
}

bool bind(const KernelConfig& c, const BindInput& in, KernelParams* out, std::string* why) {
  const FaFwdArgs& a = *static_cast<const FaFwdArgs*>(in.args);
  const bool varlen = c.s.varlen;
  const long long nb = varlen ? 1 : a.batch;
  const long long sq = varlen ? in.shape.total_q : a.seqlen_q, sk = varlen ? in.shape.total_k : a.seqlen_k;
  const int bm = 64 * c.t[kConsumers], bn = c.t[kBlockN];
  FaFwdTma tma{};
  const TensorMapDesc maps[3] = {
      fam::tma_map_4d(c.s.dtype, a.q, c.s.head_dim, sq, a.heads_q, nb, a.q_ss, a.q_sh, a.q_sb, bm),
      fam::tma_map_4d(c.s.dtype, a.k, c.s.head_dim, sk, a.heads_kv, nb, a.k_ss, a.k_sh, a.k_sb, bn),
      fam::tma_map_4d(c.s.dtype, a.v, c.s.head_dim_v, sk, a.heads_kv, nb, a.v_ss, a.v_sh, a.v_sb, bn)};
  void* const dst[3] = {&tma.q, &tma.k, &tma.v};
  if (!fam::encode_tensor_maps(in, maps, dst, 3, "fwd_wgmma", why)) return false;
  // Fixed length: O through TMA stores, 64 rows a box (a consumer's rows; the map's seq extent clips rows past
  // seqlen_q; ProblemDesc::tma_ok covers o's strides). Varlen kernels store O with 16-byte stores.
  if (!varlen) {
    const int o_dtype = c.s.o_dtype != 0 ? c.s.o_dtype : c.s.dtype;  // 16-bit (fp8 inputs: o_dtype)
    const TensorMapDesc om =
        fam::tma_map_4d(o_dtype, a.o, c.s.head_dim_v, a.seqlen_q, a.heads_q, a.batch, a.o_ss, a.o_sh, a.o_sb, 64);
    void* const odst[1] = {&tma.o};
    if (!fam::encode_tensor_maps(in, &om, odst, 1, "fwd_wgmma", why)) return false;
  }
  // (FaFwdArgs[, FaUser with user code], FaFwdTma): the template's fa_kernel(args FA_USER_PARAM, tma)
  if (c.s.mods != nullptr && in.user == nullptr) return fail(why, "the user code's arguments (FaUser) are missing");
  if (out->add(&a, sizeof a, alignof(FaFwdArgs)) &&
      (c.s.mods == nullptr || out->add(in.user, sizeof(FaUser), alignof(FaUser))) &&
      out->add(&tma, sizeof tma, alignof(FaFwdTma)))
    return true;
  return fail(why, "kernel parameters do not fit");
}

const Family kFamily{.name = "fwd_wgmma",
                     .template_name = "fwd_wgmma.cuh",
                     .role = Role::Forward,
                     .arch_min = 90,
                     .arch_max = 90,
                     .priority = 20,
                     .fp8_inputs = true,
                     .sinks = true,
                     .knobs = {Knob{"consumers", "c", "kConsumers", {1, 2, 3}},
                               fam::block_n({64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256}),
                               fam::stages({2, 3, 4}), Knob{"ping_pong", "pp", "kPingPong", {0, 1}, true},
                               Knob{"intra_overlap", "ov", "kIntraOverlap", {0, 1}, true},
                               Knob{"persistent", "p", "kPersistent", {0, 1, 2}}},
                     .covers = &covers,
                     .defaults = &defaults,
                     .valid = &valid,
                     .smem_bytes = &smem_bytes,
                     .launch = &launch,
                     .space = &space,
                     .finalize = &finalize,
                     .render_constants = &render_constants,
                     .plan = &plan,
                     .bind = &bind};

}  // namespace

FA_FAMILY_FOLDER(fwd_wgmma) { register_family(&kFamily); }

}  // namespace fa::gen
