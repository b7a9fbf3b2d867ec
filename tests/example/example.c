/* example.c -- the README's example: causal attention on a [batch, seqlen, heads, head_dim] fp16 tensor.
 * Exits 77 (skipped) with a clear message when no GPU is found. */
#include <cuda_runtime.h>
#include <fa/fa.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned short to_half(float f) { /* round-to-nearest fp16 for the example's inputs (normal range) */
  unsigned int x;
  memcpy(&x, &f, 4);
  unsigned int sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return (unsigned short)sign;
  unsigned int h = sign | ((unsigned)exp << 10) | (mant >> 13);
  if ((mant >> 12) & 1u) h += 1u;
  return (unsigned short)h;
}
static float from_half(unsigned short h) {
  unsigned int sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  if (exp == 0) {
    float f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  }
  x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}

int main(void) {
  fa_context ctx = NULL;
  if (fa_context_create(NULL, &ctx) != FA_OK) {
    fprintf(stderr, "fa_context_create: %s\n", fa_last_error());
    return 1;
  }
  if (!fa_context_has_device(ctx)) {
    printf("no GPU found (%s): skipping the example run\n", fa_last_error());
    fa_context_destroy(ctx);
    return 77;
  }
  const int B = 2, S = 100, H = 4, D = 64;
  const size_t n = (size_t)B * S * H * D;
  unsigned short* host = malloc(n * sizeof *host);
  for (size_t i = 0; i < n; ++i) host[i] = to_half((float)rand() / RAND_MAX - 0.5f);
  void *q, *k, *v, *o;
  cudaMalloc(&q, n * 2);
  cudaMalloc(&k, n * 2);
  cudaMalloc(&v, n * 2);
  cudaMalloc(&o, n * 2);
  cudaMemcpy(q, host, n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(k, host, n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(v, host, n * 2, cudaMemcpyHostToDevice);

  fa_params p;
  fa_params_init(&p);
  p.dtype = FA_DTYPE_FP16;
  p.batch = B;
  p.seqlen_q = S;
  p.seqlen_k = S;
  p.heads_q = H;
  p.heads_kv = H;
  p.head_dim = D;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o; /* BSHD, contiguous */
  p.q_stride_batch = p.k_stride_batch = p.v_stride_batch = p.o_stride_batch = (int64_t)S * H * D;
  p.q_stride_seq = p.k_stride_seq = p.v_stride_seq = p.o_stride_seq = (int64_t)H * D;
  p.q_stride_head = p.k_stride_head = p.v_stride_head = p.o_stride_head = D;
  p.mask = FA_MASK_CAUSAL;

  fa_status st = fa_run(ctx, &p, NULL /* default stream */);
  if (st != FA_OK) {
    fprintf(stderr, "fa_run: %s\n", fa_last_error());
    return 1;
  }
  cudaMemcpy(host, o, n * 2, cudaMemcpyDeviceToHost); /* synchronizes with the default stream */
  /* Row 0 of a causal mask sees only key 0, so o[b,0,h,:] == v[b,0,h,:]. */
  int bad = 0;
  unsigned short* vin = malloc(n * sizeof *vin);
  cudaMemcpy(vin, v, n * 2, cudaMemcpyDeviceToHost);
  for (int d = 0; d < D; ++d) bad += fabsf(from_half(host[d]) - from_half(vin[d])) > 1e-3f;
  printf("fa_run: %s, causal row 0 %s\n", fa_status_string(st), bad ? "WRONG" : "equals v row 0");
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  free(host);
  free(vin);
  fa_context_destroy(ctx);
  return bad ? 1 : 0;
}
