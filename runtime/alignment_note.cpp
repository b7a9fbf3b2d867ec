// alignment_note.cpp -- the info message of a problem sent to a reference kernel by its alignment (see
// alignment_note.h).
#include "runtime/alignment_note.h"

#include <fmt/format.h>

#include "generator/family.h"

namespace fa::rt {

void note_alignment_fallback(fa_context c, gen::Role role, const gen::ProblemDesc& d, const gen::Semantic& chosen) {
  if (static_cast<int>(c->log_level) < static_cast<int>(LogLevel::kInfo)) return;  // the re-selection is not free
  if (chosen.family == nullptr || !chosen.family->reference || d.aligned16 || d.dtype == gen::kFp32) return;
  gen::ProblemDesc aligned = d;
  aligned.aligned16 = aligned.tma_ok = true;
  const gen::Semantic fast = gen::select(role, aligned, context_arch(c));
  // Still a reference family when aligned: not the alignment's doing (FA_FORCE_REFERENCE, an uncovered feature).
  if (fast.family == nullptr || fast.family->reference) return;
  const bool backward = role == gen::Role::Backward;
  const std::string tensors =
      std::string(backward ? "q, k, v, o, dout, dq, dk, dv" : "q, k, v, o") + (d.has_bias ? " and bias" : "");
  gen::Semantic shown = chosen;
  shown.even_k = false;  // a property of the call's seqlen_k, not of the problem class: one message for both
  const std::string key = gen::semantic_key(shown);
  c->info(fmt::format("{} {} runs the reference kernel {} (much slower): {} need 16-byte aligned pointers and "
                      "batch / seq / head strides that are multiples of 8 elements{} for {}",
                      backward ? "backward" : "forward", key, chosen.family->name, tensors,
                      d.has_bias ? " (bias: also a contiguous last dim)" : "", fast.family->name),
          "alignment|" + key);
}

}  // namespace fa::rt
