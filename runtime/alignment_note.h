// alignment_note.h -- saying (at info level, once per problem class) that a problem runs a reference kernel only
// because its pointers or strides are not 16-byte aligned, which the fast families (fwd_mma, bwd_mma) need. Without
// it a caller whose tensors are aligned to the element size only sees a slow run and no reason.
#pragma once

#include "generator/problem.h"
#include "runtime/context.h"

namespace fa::rt {

// `chosen` is the selector's choice for (role, d). Logs when it is a reference family, d is fp16/bf16 and not
// aligned16, and the same problem aligned would have gone to a fast family. Cheap when the log level is below info.
void note_alignment_fallback(fa_context c, gen::Role role, const gen::ProblemDesc& d, const gen::Semantic& chosen);

}  // namespace fa::rt
