// selector.cpp -- THE selector: which kernel family serves a problem, and the problem's semantic part.
// fa_run, fa_is_supported, fa_problem_key, the tuner and fa-tune all go through select_forward().
#include "generator/problem.h"

#include <cstdlib>

namespace fa::gen {

Semantic select_forward(const ProblemDesc& p, int arch) {
  Semantic s;
  s.arch = arch;
  s.dtype = p.dtype;
  s.head_dim = p.head_dim;
  s.head_dim_v = p.head_dim_v;
  s.mask = p.mask;
  s.has_bias = p.has_bias;
  s.has_alibi = p.has_alibi;
  s.has_softcap = p.has_softcap;
  s.varlen = p.varlen;
  s.has_lse = p.has_lse;
  // A hint for the default table (a shape class, not a length): whether seqlen_k is a multiple of 64. finalize()
  // replaces it with the real flag for the chosen block_n.
  s.even_k = !p.varlen && p.seqlen_k > 0 && p.seqlen_k % 64 == 0;
  // FA_FORCE_REFERENCE=1 routes every problem to the reference kernel (a field switch for suspected kernel bugs;
  // results are the same by construction, only slower).
  static const bool force_ref = [] {
    const char* e = std::getenv("FA_FORCE_REFERENCE");
    return e && *e && *e != '0';
  }();
  const bool mma = !force_ref && family_available(Kind::FwdMma) && fwd_mma_covers(p, arch, nullptr);
  s.kind = mma ? Kind::FwdMma : Kind::FwdRef;
  return s;
}

KernelConfig finalize(const Semantic& s, const Tunables& t, const ProblemDesc& p) {
  KernelConfig c{s, t};
  c.s.even_k = s.kind == Kind::FwdMma && !p.varlen && t.block_n > 0 && p.seqlen_k % t.block_n == 0;
  return c;
}

LaunchShape launch_shape(const ProblemDesc& p) {
  LaunchShape l;
  l.batch = p.batch;
  l.max_seqlen_q = p.seqlen_q;
  l.max_seqlen_k = p.seqlen_k;
  l.heads_q = p.heads_q;
  l.heads_kv = p.heads_kv;
  l.total_q = p.varlen ? p.total_q : p.batch * p.seqlen_q;
  l.total_k = p.varlen ? p.total_k : p.batch * p.seqlen_k;
  return l;
}

}  // namespace fa::gen
