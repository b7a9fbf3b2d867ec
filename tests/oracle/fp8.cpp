// fp8.cpp -- exact OCP FP8 codecs and the oracle over fp8 inputs (fp8.h), written from the format definitions.
#include "tests/oracle/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace fa::oracle {
namespace {

// The layout of a format: mantissa bits, exponent bias.
struct Format {
  int mbits, bias;
};
Format format_of(int format) {
  if (format == kFp8E4m3) return {3, 7};
  if (format == kFp8E5m2) return {2, 15};
  throw std::invalid_argument("fa::oracle: fp8 format must be 4 (e4m3) or 5 (e5m2), got " + std::to_string(format));
}

constexpr uint8_t kNan = 0x7F;

}  // namespace

double fp8_max(int format) { return format_of(format).mbits == 3 ? 448.0 : 57344.0; }

double fp8_decode(uint8_t code, int format) {
  const Format f = format_of(format);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int man = code & ((1 << f.mbits) - 1);
  const int exp = (code & 0x7F) >> f.mbits;
  const int exp_all = (1 << (7 - f.mbits)) - 1;  // 15 or 31
  if (format == kFp8E4m3 && exp == exp_all && man == 7) return std::numeric_limits<double>::quiet_NaN();
  if (format == kFp8E5m2 && exp == exp_all)
    return man == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  const double scale = std::ldexp(1.0, -f.mbits);
  if (exp == 0) return sign * std::ldexp(man * scale, 1 - f.bias);  // subnormal: 0.m x 2^(1 - bias)
  return sign * std::ldexp(1.0 + man * scale, exp - f.bias);
}

uint8_t fp8_encode(double x, int format, Fp8Overflow overflow) {
  const Format f = format_of(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | kNan);
  const double a = std::fabs(x);
  const double max = fp8_max(format);
  const uint8_t max_code = format == kFp8E4m3 ? 0x7E : 0x7B;
  const uint8_t over_code = format == kFp8E4m3 ? kNan : 0x7C;  // kTorch: NaN (e4m3) or inf (e5m2)
  auto beyond = [&] {
    return static_cast<uint8_t>(sign | (overflow == Fp8Overflow::kSaturate ? max_code : over_code));
  };
  if (std::isinf(a)) return beyond();
  const int emin = 1 - f.bias;  // the exponent of the smallest normal
  int e = emin;
  if (a >= std::ldexp(1.0, emin)) {
    int e2 = 0;
    (void)std::frexp(a, &e2);  // a = m 2^e2, m in [0.5, 1)
    e = e2 - 1;
  }
  const double quantum = std::ldexp(1.0, e - f.mbits);  // the spacing of fp8 values in a's binade
  const double r = std::nearbyint(a / quantum);         // a / quantum is exact; nearbyint rounds ties to even
  const double v = r * quantum;
  if (v > max) return beyond();
  if (v == 0.0) return sign;
  if (v < std::ldexp(1.0, emin)) return static_cast<uint8_t>(sign | static_cast<int>(r));  // subnormal: man = r
  int ev = 0;
  const double m = std::frexp(v, &ev);  // v = m 2^ev, m in [0.5, 1): the exponent is ev - 1
  const int man = static_cast<int>(std::ldexp(m, f.mbits + 1)) - (1 << f.mbits);
  const int exp = ev - 1 + f.bias;
  return static_cast<uint8_t>(sign | (exp << f.mbits) | man);
}

std::vector<double> fp8_dequantize(const Problem& p, const Fp8Tensor4& t, bool queries, int heads, int dim) {
  validate(p);
  const bool varlen = is_varlen(p);
  const std::vector<int>& cu = queries ? p.cu_seqlens_q : p.cu_seqlens_k;
  const int group = p.heads_q / p.heads_kv;
  auto offset = [&](int b, int tok, int h) {
    const long long token = varlen ? static_cast<long long>(cu[static_cast<size_t>(b)]) + tok : tok;
    return (varlen ? 0 : static_cast<long long>(b) * t.sb) + token * t.ss + static_cast<long long>(h) * t.sh;
  };
  long long size = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int n = queries ? seqlen_q_of(p, b) : seqlen_k_of(p, b);
    if (n > 0) size = std::max(size, offset(b, n - 1, heads - 1) + dim);
  }
  std::vector<double> out(static_cast<size_t>(size), 0.0);
  for (int b = 0; b < p.batch; ++b) {
    const int n = queries ? seqlen_q_of(p, b) : seqlen_k_of(p, b);
    for (int tok = 0; tok < n; ++tok)
      for (int h = 0; h < heads; ++h) {
        const int g = queries ? h / group : h;
        const double s = t.scale != nullptr ? t.scale[static_cast<long long>(b) * t.scale_sb + g * t.scale_sh] : 1.0;
        const long long off = offset(b, tok, h);
        for (int d = 0; d < dim; ++d) out[static_cast<size_t>(off + d)] = fp8_decode(t.data[off + d], t.format) * s;
      }
  }
  return out;
}

void forward_fp8(const Problem& p, const Fp8Tensor4& q, const Fp8Tensor4& k, const Fp8Tensor4& v, MutTensor4 o,
                 double* lse) {
  const std::vector<double> qd = fp8_dequantize(p, q, true, p.heads_q, p.head_dim);
  forward_fp8_cache(p, Tensor4{qd.data(), q.sb, q.ss, q.sh}, k, v, o, lse);
}

void forward_fp8_cache(const Problem& p, Tensor4 q, const Fp8Tensor4& k, const Fp8Tensor4& v, MutTensor4 o,
                       double* lse) {
  const std::vector<double> kd = fp8_dequantize(p, k, false, p.heads_kv, p.head_dim);
  const std::vector<double> vd = fp8_dequantize(p, v, false, p.heads_kv, head_dim_v_of(p));
  forward(p, q, Tensor4{kd.data(), k.sb, k.ss, k.sh}, Tensor4{vd.data(), v.sb, v.ss, v.sh}, o, lse);
}

}  // namespace fa::oracle
