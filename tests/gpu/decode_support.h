// decode_support.h -- the KV-cache decode tests' problems (tests/gpu/test_decode.cpp, test_background_decode.cpp):
// random queries and caches, the per-sequence float64 oracle, contiguous and paged device caches (with used lengths,
// NaN past them), the call's parameters, a run with poisoned outputs (on the suite's context or a given one) and the
// comparison with the oracle. An fp8 cache (DecodeSpec::kv_dtype): the caches hold fp8 values (k / v as the codes'
// values), read with per-head or per-tensor k_scale / v_scale; the oracle sees the dequantized cache.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_support.h"

namespace fa::test {

struct DecodeSpec {
  int dtype = FA_DTYPE_BF16;
  int batch = 2, sq = 1, cap = 300, hq = 8, hkv = 2, d = 128, dv = 128;
  int mask = FA_MASK_NONE, wl = -1, wr = -1;
  bool alibi = false;
  float softcap = 0.f;
  int kv_dtype = 0;             // FA_DTYPE_E4M3 / FA_DTYPE_E5M2: an fp8 cache (q, o of dtype); 0: the cache in dtype
  bool per_head_scale = false;  // fp8: k_scale / v_scale one per KV head (stride 1), else one for all (stride 0)
  bool sinks = false;           // attention sinks: [hq] logits drawn by random_sinks (gpu_support.h)
};

std::string describe(const DecodeSpec& s);

// Host data of one problem: logical caches [batch, cap, hkv, d] and the oracle's answer for given used lengths and
// invalid pages.
struct DecodeData {
  DecodeSpec s;
  std::vector<double> q, k, v, alibi;
  std::vector<float> alibi_f;
  std::vector<float> k_scale, v_scale;  // fp8 cache: [hkv] factors (all equal unless per_head_scale)
  std::vector<double> sinks;            // s.sinks: [hq]
  std::vector<float> sinks_f;
  DevBuf dq, d_alibi, d_o, d_lse, d_k_scale, d_v_scale, d_sinks;
  size_t o_n = 0, lse_n = 0;
};

void make_data(std::mt19937_64& rng, const DecodeSpec& s, DecodeData* x);

// The oracle per sequence over its used keys; `masked[b][j]` hides key j (a page outside the pool).
void oracle_of(const DecodeData& x, const std::vector<int>& used, const std::vector<std::vector<uint8_t>>& masked,
               std::vector<double>* o, std::vector<double>* lse);

// A cache on the device: contiguous [batch, cap, hkv, d] (rows past the used lengths NaN), or a pool of pages
// (page_size rows each; pages the table does not name, and table entries past the used lengths, hold / point at NaN).
// Page layouts (make_paged): kRowMajor [page_size, hkv, d] per page (vLLM's); kHeadMajor [hkv, page_size, d] (the
// page stride a multiple of the row stride, not page_size of them); kPadded kRowMajor with 8 elements between pages
// (the page stride no multiple of the row stride).
enum PageLayout { kRowMajor, kHeadMajor, kPadded };

struct Cache {
  int page_size = 0;    // 0: contiguous
  bool latent = false;  // v is k's first head_dim_v columns (MLA's latent cache): params_of passes v = k
  int num_pages = 0, bt_stride = 0;
  int64_t k_sb = 0, k_ss = 0, k_sh = 0, v_sb = 0, v_ss = 0, v_sh = 0;  // paged: the pools' strides (elements)
  std::vector<int> table;
  DevBuf dk, dv, d_bt, d_used;
};

inline std::vector<uint8_t> nan_bytes(size_t n) { return std::vector<uint8_t>(n * 2, 0xff); }

// Host bytes of cache values (k or v, any layout) in the cache's dtype: fp8 codes (NaN: 0x7F) or s.dtype.
std::vector<uint8_t> encode_cache(const DecodeSpec& s, const std::vector<double>& v);

void make_contiguous(const DecodeData& x, const std::vector<int>& used, Cache* c);

// Pages in a random order; `extra` NaN pages in the pool; table entries past the used pages point at them.
void make_paged(std::mt19937_64& rng, const DecodeData& x, const std::vector<int>& used, int page_size, Cache* c,
                PageLayout layout = kRowMajor);

void set_used(Cache* c, const std::vector<int>& used);

fa_params params_of(DecodeData& x, Cache& c, bool with_used, int num_splits);

struct Out {
  std::vector<uint8_t> o_bytes, lse_bytes;
  std::string failure;
  std::string key;
};

void poison(DecodeData& x);

Out run(DecodeData& x, fa_params p, fa_context ctx = nullptr);

// "" when o and lse match the oracle (o: relative error within the dtype's tolerance; lse: infinities equal,
// finite values within 2e-3), else what differs.
std::string compare(const DecodeData& x, const Out& r, const std::vector<double>& o_ref,
                    const std::vector<double>& lse_ref);

std::vector<int> random_used(std::mt19937_64& rng, int batch, int cap);

// A uniform pick among values, for the random-case tests.
struct Pick {
  std::mt19937_64& rng;
  int operator()(std::initializer_list<int> xs) {
    std::uniform_int_distribution<size_t> u(0, xs.size() - 1);
    return *(xs.begin() + u(rng));
  }
};
// The random parts of case c that the random decode tests share (s's dtypes, heads and capacity already set): query
// tokens (at most the contiguous decode class's 16 packed rows unless paged), head dims (dv 64 every 7th case), batch,
// mask and window, ALiBi (every 3rd case) and softcap (every 5th).
void random_features(Pick& pick, int c, bool paged, DecodeSpec* s);
// $FA_TEST_CASES, else `fallback`: how many random cases a test runs.
int case_count(int fallback);

// One random problem of spec s (random used lengths; its cache contiguous, or paged at page_size > 0) run at
// `splits` against the oracle: "" when it matches, else what differs (the key in *key).
std::string run_random_case(std::mt19937_64& rng, const DecodeSpec& s, int page_size, int splits, std::string* key);

// MLA's latent layout: v is the first head_dim_v columns of k, one tensor (params_of passes v = k with k's strides).
// The oracle's v becomes k's first columns.
void make_latent(DecodeData* x);

// The MLA decode shape: 128 query heads over one latent KV head, d 576 / dv 512.
DecodeSpec mla_spec(int batch, int cap);

}  // namespace fa::test
