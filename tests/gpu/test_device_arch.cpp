// test_device_arch.cpp -- a context takes its device's arch and limits (runtime/context.h: device_limits): the
// compute capability names the arch, and the opt-in shared memory per block, resident threads per SM and SMs the
// driver reports are the limits; on an arch fa knows, the table the CPU uses without a GPU (limits_for_arch) agrees
// with the device. On Blackwell (sm_100 / 103 / 120 / 121) a prefill forward and backward take the mma families and
// no Hopper family is ranked; on sm_90 the Hopper ones.
#include <gtest/gtest.h>

#include <string>

#include "generator/problem.h"
#include "runtime/arch.h"
#include "runtime/context.h"
#include "tests/gpu/gpu_support.h"

namespace fa::test {
namespace {

gen::ProblemDesc prefill(bool backward) {
  gen::ProblemDesc p;
  p.dtype = gen::kBf16;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 2048;
  p.heads_q = p.heads_kv = 16;
  p.head_dim = p.head_dim_v = 128;
  p.mask = gen::kMaskCausal;
  p.aligned16 = p.tma_ok = true;
  p.has_lse = true;
  p.backward = backward;
  return p;
}

TEST(DeviceArch, TheContextTakesTheDevicesArchAndLimits) {
  Gpu& g = gpu();
  if (!g.ok()) GTEST_SKIP() << g.why;
  const fa_context c = g.ctx;
  int major = 0, minor = 0, smem = 0, threads = 0, sms = 0;
  ASSERT_EQ(g.d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev), CUDA_SUCCESS);
  ASSERT_EQ(g.d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev), CUDA_SUCCESS);
  ASSERT_EQ(g.d->cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, c->dev),
            CUDA_SUCCESS);
  ASSERT_EQ(g.d->cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, c->dev),
            CUDA_SUCCESS);
  ASSERT_EQ(g.d->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev), CUDA_SUCCESS);
  const int arch = rt::arch_of_capability(major, minor);
  EXPECT_EQ(c->arch, arch) << g.name;
  EXPECT_EQ(c->limits.arch, arch);
  EXPECT_EQ(c->limits.max_smem_optin, smem);
  EXPECT_EQ(c->limits.max_threads_per_sm, threads);
  EXPECT_EQ(c->limits.sm_count, sms);
  if (rt::known_arch(arch)) {  // the figures the CPU takes for this arch are the device's
    const gen::DeviceLimits table = gen::limits_for_arch(arch);
    EXPECT_EQ(table.max_smem_optin, smem) << g.name << " sm_" << arch;
    EXPECT_EQ(table.max_threads_per_sm, threads) << g.name << " sm_" << arch;
  }
  const gen::Semantic fwd = gen::select_forward(prefill(false), arch);
  const gen::Semantic bwd = gen::select_backward(prefill(true), arch);
  ASSERT_NE(fwd.family, nullptr);
  ASSERT_NE(bwd.family, nullptr);
  if (arch == 90) {
    EXPECT_STREQ(fwd.family->name, "fwd_wgmma");
    EXPECT_STREQ(bwd.family->name, "bwd_wgmma");
  } else {
    EXPECT_STREQ(fwd.family->name, "fwd_mma") << "sm_" << arch;
    EXPECT_STREQ(bwd.family->name, "bwd_mma") << "sm_" << arch;
    for (const gen::Role role : {gen::Role::Forward, gen::Role::Backward, gen::Role::Step})
      for (const gen::Family* f : gen::ranked_families(role, arch))
        for (const char* hopper : {"fwd_wgmma", "bwd_wgmma", "fwd_mla"}) EXPECT_STRNE(f->name, hopper) << "sm_" << arch;
  }
}

}  // namespace
}  // namespace fa::test
