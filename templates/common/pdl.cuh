// common/pdl.cuh -- programmatic dependent launch (sm_90+; nothing before): a kernel launched with the
// programmatic-stream-serialization attribute may start while the previous kernel of its stream still runs, and must
// call fa_pdl_wait() before it reads or writes memory that kernel touches (the wait returns once that kernel has
// completed and its writes are visible, so it is safe after any kernel, whether or not it triggers). A producer
// calls fa_pdl_launch_dependents() to let such a dependent be scheduled before it finishes (without it, the
// dependent starts when the producer completes, its launch already staged).
#ifndef FA_COMMON_PDL_CUH
#define FA_COMMON_PDL_CUH

FA_DEVICE void fa_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
FA_DEVICE void fa_pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#endif  // FA_COMMON_PDL_CUH
