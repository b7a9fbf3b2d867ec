// validate.h -- every field of fa_params / fa_bwd_params checked before anything runs; the result is a
// ProblemDesc (for the selector) and a normalised copy of the params.
#pragma once

#include "fa/fa.h"
#include "generator/problem.h"
#include "runtime/status.h"

namespace fa::rt {

// Copies *in (of any known struct_size/version) into *out (current layout, defaults for missing fields) and
// validates it. On failure nothing is written to *desc.
// fa_mods checked and its semantic part interned (*out: nullptr when it holds no code and no buffers).
// *depends: the FA_MOD_DEPENDS_* bits (version 1: both). `backward`: score_mod needs score_mod_grad, which the
// record then holds (the forward's record never does: its kernel keys do not depend on the derivative).
Status validate_mods(const fa_mods& m, bool backward, const gen::UserMods** out, int* depends);

// fa_mods.mask_epoch of a validated fa_mods (0: none, or a version below 4 that has no such field; nullptr: 0).
uint64_t mods_epoch(const fa_mods* m);

Status validate_forward(const fa_params* in, fa_params* out, gen::ProblemDesc* desc);

struct BwdView {
  fa_params fwd;
  fa_bwd_params bwd;
};
Status validate_backward(const fa_bwd_params* in, BwdView* out, gen::ProblemDesc* desc);

// fa_merge_params checked (sizes, alignment, strides, no output overlapping an input); *desc: the problem of the
// merge's kernel (fwd_combine): dtype, batch, heads_q = heads_kv = heads, seqlen_q, head_dim = head_dim_v.
Status validate_merge(const fa_merge_params* in, fa_merge_params* out, gen::ProblemDesc* desc);

size_t dtype_size(int dtype);

}  // namespace fa::rt
