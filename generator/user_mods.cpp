// user_mods.cpp -- interning and rendering of user code (see user_mods.h).
#include "generator/user_mods.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "generator/config.h"

namespace fa::gen {

namespace {

// Records by content hash (collisions kept side by side). fa_run interns on every call with user code, so a lookup
// hashes the views and compares against the stored record: no allocation, under a shared lock.
struct Interned {
  std::shared_mutex mu;
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<UserMods>>> records;
};

Interned& interned() {
  static Interned* table = new Interned;  // never destroyed: records are referenced by cached configs until exit
  return *table;
}

uint64_t content_hash(std::string_view mask_mod, std::string_view score_mod, std::string_view grad, int num_buffers,
                      const std::array<int, kMaxUserBuffers>& dtype, const std::array<int, kMaxUserBuffers>& rank) {
  uint64_t h = fnv1a64("fa-user-mods", 12);
  h = fnv1a64(mask_mod.data(), mask_mod.size(), h);
  h = fnv1a64("\0", 1, h);
  h = fnv1a64(score_mod.data(), score_mod.size(), h);
  h = fnv1a64(&num_buffers, sizeof num_buffers, h);
  h = fnv1a64(dtype.data(), sizeof dtype, h);
  h = fnv1a64(rank.data(), sizeof rank, h);
  if (!grad.empty()) h = fnv1a64(grad.data(), grad.size(), fnv1a64("\0grad", 5, h));  // absent: the old hash
  return h;
}

// Whether record m holds exactly these contents.
bool holds(const UserMods& m, std::string_view mask_mod, std::string_view score_mod, std::string_view grad,
           int num_buffers, const std::array<int, kMaxUserBuffers>& dtype,
           const std::array<int, kMaxUserBuffers>& rank) {
  return m.mask_mod == mask_mod && m.score_mod == score_mod && m.score_mod_grad == grad &&
         m.num_buffers == num_buffers && m.buf_dtype == dtype && m.buf_rank == rank;
}

const UserMods* find(const std::vector<std::unique_ptr<UserMods>>& same_hash, std::string_view mask_mod,
                     std::string_view score_mod, std::string_view grad, int num_buffers,
                     const std::array<int, kMaxUserBuffers>& dtype, const std::array<int, kMaxUserBuffers>& rank) {
  for (const auto& m : same_hash)
    if (holds(*m, mask_mod, score_mod, grad, num_buffers, dtype, rank)) return m.get();
  return nullptr;
}

// The interned record of these contents (hashed, looked up, added when new).
const UserMods* intern_hashed(std::string_view mask_mod, std::string_view score_mod, std::string_view grad,
                              int num_buffers, const std::array<int, kMaxUserBuffers>& dtype,
                              const std::array<int, kMaxUserBuffers>& rank) {
  const uint64_t h = content_hash(mask_mod, score_mod, grad, num_buffers, dtype, rank);
  Interned& t = interned();
  {
    std::shared_lock<std::shared_mutex> lock(t.mu);
    auto it = t.records.find(h);
    if (it != t.records.end())
      if (const UserMods* m = find(it->second, mask_mod, score_mod, grad, num_buffers, dtype, rank)) return m;
  }
  std::unique_lock<std::shared_mutex> lock(t.mu);
  auto& same_hash = t.records[h];
  if (const UserMods* m = find(same_hash, mask_mod, score_mod, grad, num_buffers, dtype, rank)) return m;
  auto m = std::make_unique<UserMods>();
  m->mask_mod = std::string(mask_mod);
  m->score_mod = std::string(score_mod);
  m->score_mod_grad = std::string(grad);
  m->num_buffers = num_buffers;
  m->buf_dtype = dtype;
  m->buf_rank = rank;
  m->hash = h;
  same_hash.push_back(std::move(m));
  return same_hash.back().get();
}

}  // namespace

const UserMods* intern_user_mods(std::string_view mask_mod, std::string_view score_mod, int num_buffers,
                                 const int* buf_dtype, const int* buf_rank, std::string_view grad) {
  if (mask_mod.empty() && score_mod.empty() && grad.empty() && num_buffers == 0) return nullptr;
  std::array<int, kMaxUserBuffers> dtype{}, rank{};
  for (int n = 0; n < num_buffers && n < kMaxUserBuffers; ++n) {
    dtype[static_cast<size_t>(n)] = buf_dtype[n];
    rank[static_cast<size_t>(n)] = buf_rank[n];
  }
  // The records this thread returned last: a repeated call compares the contents (memcmp) instead of hashing them
  // byte by byte (about 1 us per KiB of code); records are never freed, so the pointers stay valid.
  thread_local std::array<const UserMods*, 4> recent{};
  thread_local size_t recent_next = 0;
  for (const UserMods* m : recent)
    if (m != nullptr && holds(*m, mask_mod, score_mod, grad, num_buffers, dtype, rank)) return m;
  const UserMods* found = intern_hashed(mask_mod, score_mod, grad, num_buffers, dtype, rank);
  recent[recent_next++ % recent.size()] = found;
  return found;
}

std::string user_mods_tag(const UserMods& m) { return "mod" + hex64(m.hash); }

const char* user_dtype_ctype(int dtype) {
  switch (dtype) {
    case 1: return "int";
    case 2: return "long long";
    case 3: return "float";
    case 4: return "unsigned short";  // fp16 bits: fa_half_to_float
    case 5: return "unsigned short";  // bf16 bits: fa_bf16_to_float
    case 6: return "unsigned char";
    default: return nullptr;
  }
}

std::string render_user_mods(const UserMods* m) {
  std::string src = "// user code (fa_mods)\n";
  src += m != nullptr ? "#define FA_USER_PARAM , const __grid_constant__ FaUser fa_user_args\n"
                        "#define FA_USER_ARGS fa_user_args\n"
                      : "#define FA_USER_PARAM\n#define FA_USER_ARGS FaUser{}\n";
  for (int n = 0; n < kMaxUserBuffers; ++n) {
    const char* t =
        m != nullptr && n < m->num_buffers ? user_dtype_ctype(m->buf_dtype[static_cast<size_t>(n)]) : nullptr;
    src += fmt::format("typedef {} fa_buf{}_t;\n", t != nullptr ? t : "unsigned char", n);
  }
  src += "FA_DEVICE bool fa_user_mask(int b, int h, int i, int j, const FaUser& u) {\n";
  if (m != nullptr && !m->mask_mod.empty()) {
    src += "  (void)b; (void)h; (void)i; (void)j; (void)u;\n#line 1 \"mask_mod\"\n";
    src += m->mask_mod;
    src += "\n#line 1 \"fa_user_code\"\n}\n";
  } else {
    src += "  return true;\n}\n";
  }
  // score_mod and its derivative (backward records only), each under its own #line name
  for (const auto& [fn, name, body, stub] :
       {std::tuple{"fa_user_score", "score_mod", m != nullptr ? &m->score_mod : nullptr, "s"},
        std::tuple{"fa_user_score_grad", "score_mod_grad", m != nullptr ? &m->score_mod_grad : nullptr, "1.0f"}}) {
    src += fmt::format("FA_DEVICE float {}(float s, int b, int h, int i, int j, const FaUser& u) {{\n", fn);
    if (body != nullptr && !body->empty()) {
      src += fmt::format("  (void)b; (void)h; (void)i; (void)j; (void)u;\n#line 1 \"{}\"\n", name);
      src += *body;
      src += "\n#line 1 \"fa_user_code\"\n}\n";
    } else {
      src += fmt::format("  return {};\n}}\n", stub);
    }
  }
  return src;
}

}  // namespace fa::gen
