// user_mods.cpp -- interning and rendering of user code (see user_mods.h).
#include "generator/user_mods.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "generator/config.h"

namespace fa::gen {

namespace {

using Content = std::tuple<std::string, std::string, int, std::array<int, kMaxUserBuffers>, std::array<int, kMaxUserBuffers>>;

struct Interned {
  std::mutex mu;
  std::map<Content, std::unique_ptr<UserMods>> records;
};

Interned& interned() {
  static Interned* table = new Interned;  // never destroyed: records are referenced by cached configs until exit
  return *table;
}

}  // namespace

const UserMods* intern_user_mods(std::string_view mask_mod, std::string_view score_mod, int num_buffers,
                                 const int* buf_dtype, const int* buf_rank) {
  if (mask_mod.empty() && score_mod.empty() && num_buffers == 0) return nullptr;
  Content key{std::string(mask_mod), std::string(score_mod), num_buffers, {}, {}};
  for (int n = 0; n < num_buffers && n < kMaxUserBuffers; ++n) {
    std::get<3>(key)[static_cast<size_t>(n)] = buf_dtype[n];
    std::get<4>(key)[static_cast<size_t>(n)] = buf_rank[n];
  }
  Interned& t = interned();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.records.find(key);
  if (it != t.records.end()) return it->second.get();
  auto m = std::make_unique<UserMods>();
  m->mask_mod = std::get<0>(key);
  m->score_mod = std::get<1>(key);
  m->num_buffers = num_buffers;
  m->buf_dtype = std::get<3>(key);
  m->buf_rank = std::get<4>(key);
  uint64_t h = fnv1a64("fa-user-mods", 12);
  h = fnv1a64(m->mask_mod.data(), m->mask_mod.size(), h);
  h = fnv1a64("\0", 1, h);
  h = fnv1a64(m->score_mod.data(), m->score_mod.size(), h);
  h = fnv1a64(&m->num_buffers, sizeof m->num_buffers, h);
  h = fnv1a64(m->buf_dtype.data(), sizeof m->buf_dtype, h);
  m->hash = fnv1a64(m->buf_rank.data(), sizeof m->buf_rank, h);
  const UserMods* out = m.get();
  t.records.emplace(std::move(key), std::move(m));
  return out;
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
  src += m != nullptr ? "#define FA_USER_PARAM , const FaUser fa_user_args\n#define FA_USER_ARGS fa_user_args\n"
                      : "#define FA_USER_PARAM\n#define FA_USER_ARGS FaUser{}\n";
  for (int n = 0; n < kMaxUserBuffers; ++n) {
    const char* t = m != nullptr && n < m->num_buffers ? user_dtype_ctype(m->buf_dtype[static_cast<size_t>(n)]) : nullptr;
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
  src += "FA_DEVICE float fa_user_score(float s, int b, int h, int i, int j, const FaUser& u) {\n";
  if (m != nullptr && !m->score_mod.empty()) {
    src += "  (void)b; (void)h; (void)i; (void)j; (void)u;\n#line 1 \"score_mod\"\n";
    src += m->score_mod;
    src += "\n#line 1 \"fa_user_code\"\n}\n";
  } else {
    src += "  return s;\n}\n";
  }
  return src;
}

}  // namespace fa::gen
