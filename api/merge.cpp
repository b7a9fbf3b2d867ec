// merge.cpp -- fa_merge_partials: the merge of partial attention results over disjoint key sets (context
// parallelism) runs the split-KV combine step (generator/families/fwd_combine, templates/fwd_combine.cuh) as a plan
// of one launch over the caller's float32 parts, at the family's default tunables, on the caller's stream.
#include "api/guarded.h"
#include "fa/fa.h"
#include "runtime/launch.h"
#include "runtime/validate.h"

using namespace fa::rt;
using fa::api::check_context;
using fa::api::guarded;

namespace {

// The one-step plan of a validated merge: fwd_combine for (dtype, head_dim) on the context's arch.
Status merge_plan(fa_context c, const fa::gen::ProblemDesc& d, fa::gen::Plan* out) {
  const fa::gen::Family* f = fa::gen::find_family("fwd_combine");
  if (f == nullptr) return error(FA_ERROR_INTERNAL, "the fwd_combine family is not built in");
  const fa::gen::Semantic s = fa::gen::semantic_for(*f, d, context_arch(c));
  out->steps = {fa::gen::finalize(s, f->defaults(s), d)};
  out->num_splits = d.num_splits;
  std::string why;
  if (!fa::gen::is_valid(out->steps[0], c->limits, &why))  // THE validity predicate, as for every launch
    return error(FA_ERROR_NOT_SUPPORTED, fa::gen::canonical_key(out->steps[0]) + ": " + why);
  return Status::Ok();
}

FaFwdArgs merge_args(const fa_merge_params& p) {
  FaFwdArgs a{};
  a.o = p.o;
  a.o_sb = p.o_stride_batch;
  a.o_ss = p.o_stride_seq;
  a.o_sh = p.o_stride_head;
  a.lse = p.lse;
  a.lse_sh = p.seqlen;
  a.lse_sb = static_cast<long long>(p.heads) * p.seqlen;
  a.batch = p.batch;
  a.seqlen_q = a.seqlen_k = p.seqlen;
  a.heads_q = a.heads_kv = p.heads;
  a.group = 1;
  a.num_splits = p.num_parts;
  a.part_o = const_cast<float*>(p.part_o);  // read only by the combine
  a.part_lse = const_cast<float*>(p.part_lse);
  return a;
}

Status merge(fa_context c, const fa_merge_params* in, CUstream stream) {
  Status st = check_context(c);
  if (!st.ok()) return st;
  fa_merge_params p;
  fa::gen::ProblemDesc d;
  st = validate_merge(in, &p, &d);
  if (!st.ok()) return st;
  fa::gen::Plan plan;
  st = merge_plan(c, d, &plan);
  if (!st.ok()) return st;
  if (!c->has_device) return error(FA_ERROR_NO_DEVICE, c->no_device_reason);
  bool capturing = false;
  st = stream_capturing(c, stream, &capturing);
  if (!st.ok()) return st;
  FaFwdArgs args = merge_args(p);
  PlanArgs pa{&args, sizeof args, {}};
  return enqueue_plan(c, plan, fa::gen::launch_shape(d), pa, !capturing, stream, nullptr, 0);
}

}  // namespace

extern "C" FA_API fa_status fa_merge_partials(fa_context c, const fa_merge_params* params, void* stream) {
  return guarded("fa_merge_partials", [&] { return merge(c, params, static_cast<CUstream>(stream)); });
}
