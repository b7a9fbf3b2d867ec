// user_mods.h -- user code in a kernel (fa_mods: mask_mod / score_mod): the semantic record a key holds, interned so
// that a Semantic compares and orders by pointer, and its rendering into the translation unit.
//
// A UserMods is what changes the compiled code: the bodies and each buffer's dtype and rank. Pointers, shapes,
// strides and scalars are values (FaUser in the kernel ABI) and never part of it. The derivative of score_mod is
// part of the backward's records only (runtime/validate.h), so forward keys never depend on it. Interned records
// live for the process (a server registers a handful of mods; each costs its source text once).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace fa::gen {

inline constexpr int kMaxUserBuffers = 4;

struct UserMods {
  std::string mask_mod;        // body, or empty
  std::string score_mod;       // body, or empty
  std::string score_mod_grad;  // body of d score_mod / d s (backward records), or empty
  int num_buffers = 0;
  std::array<int, kMaxUserBuffers> buf_dtype{};  // fa_user_dtype values
  std::array<int, kMaxUserBuffers> buf_rank{};
  uint64_t hash = 0;  // of everything above: the key's ".mod<hash>" part
};

// Whether m (nullptr: no user code) has a mask_mod / a score_mod: what kHasMaskMod / kHasScoreMod render, and
// what the families' rules and plans ask.
inline bool has_mask_mod(const UserMods* m) { return m != nullptr && !m->mask_mod.empty(); }
inline bool has_score_mod(const UserMods* m) { return m != nullptr && !m->score_mod.empty(); }

// The interned record of these contents (one pointer per distinct content, thread-safe), or nullptr when every
// body is empty and there are no buffers. An empty score_mod_grad leaves the hash as it was before the field.
const UserMods* intern_user_mods(std::string_view mask_mod, std::string_view score_mod, int num_buffers,
                                 const int* buf_dtype, const int* buf_rank, std::string_view score_mod_grad = {});

// "mod" + 16 hex digits of the hash.
std::string user_mods_tag(const UserMods& m);

// The device code every kernel gets after fa_common.cuh: FA_USER_PARAM / FA_USER_ARGS (the kernel's second
// parameter, const FaUser, present only with user code: fa_args.cuh), fa_buf<n>_t typedefs, fa_user_mask,
// fa_user_score and fa_user_score_grad (the user's bodies under #line directives naming "mask_mod" / "score_mod" /
// "score_mod_grad", so that NVRTC counts lines in the user's own snippet; identity stubs when absent: true, s, 1),
// and the prelude flags kHasMaskMod / kHasScoreMod are rendered by render_source.
std::string render_user_mods(const UserMods* m);

// The C type of a fa_user_dtype in device code ("int", "long long", "float", "__half"-free 16-bit storage types are
// "unsigned short"); nullptr for an unknown dtype.
const char* user_dtype_ctype(int dtype);

}  // namespace fa::gen
