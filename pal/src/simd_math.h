// exp and tanh over a SIMD interface (shared by the per-ISA kernels; internal linkage, see
// attention_kernel.h). exp: Cephes-style range reduction and degree-6 polynomial, |rel err| ~1e-7 over
// [-87.3, 88.7] (inputs are clamped to that range, so exp(-inf) is ~1e-38, never NaN). tanh: the rational
// approximation Eigen uses (odd degree-13 over even degree-6), |err| a few ulp, clamped beyond |x| > 7.9.
#pragma once

namespace pal::detail {
namespace {

template <class Isa>
typename Isa::V simd_exp(typename Isa::V x) {
  using V = typename Isa::V;
  x = Isa::min(Isa::max(x, Isa::set1(-87.33654f)), Isa::set1(88.72283f));
  const V fx = Isa::round(Isa::mul(x, Isa::set1(1.44269504088896341f)));
  V r = Isa::fnmadd(fx, Isa::set1(0.693359375f), x);
  r = Isa::fnmadd(fx, Isa::set1(-2.12194440e-4f), r);
  V y = Isa::set1(1.9875691500e-4f);
  y = Isa::fmadd(y, r, Isa::set1(1.3981999507e-3f));
  y = Isa::fmadd(y, r, Isa::set1(8.3334519073e-3f));
  y = Isa::fmadd(y, r, Isa::set1(4.1665795894e-2f));
  y = Isa::fmadd(y, r, Isa::set1(1.6666665459e-1f));
  y = Isa::fmadd(y, r, Isa::set1(5.0000001201e-1f));
  y = Isa::fmadd(y, Isa::mul(r, r), Isa::add(r, Isa::set1(1.0f)));
  return Isa::mul(y, Isa::pow2i(fx));
}

template <class Isa>
typename Isa::V simd_tanh(typename Isa::V x) {
  using V = typename Isa::V;
  x = Isa::min(Isa::max(x, Isa::set1(-7.90531110763549805f)), Isa::set1(7.90531110763549805f));
  const V x2 = Isa::mul(x, x);
  V p = Isa::set1(-2.76076847742355e-16f);
  p = Isa::fmadd(x2, p, Isa::set1(2.00018790482477e-13f));
  p = Isa::fmadd(x2, p, Isa::set1(-8.60467152213735e-11f));
  p = Isa::fmadd(x2, p, Isa::set1(5.12229709037114e-08f));
  p = Isa::fmadd(x2, p, Isa::set1(1.48572235717979e-05f));
  p = Isa::fmadd(x2, p, Isa::set1(6.37261928875436e-04f));
  p = Isa::fmadd(x2, p, Isa::set1(4.89352455891786e-03f));
  p = Isa::mul(x, p);
  V q = Isa::set1(1.19825839466702e-06f);
  q = Isa::fmadd(x2, q, Isa::set1(1.18534705686654e-04f));
  q = Isa::fmadd(x2, q, Isa::set1(2.26843463243900e-03f));
  q = Isa::fmadd(x2, q, Isa::set1(4.89352518554385e-03f));
  return Isa::div(p, q);
}

}  // namespace
}  // namespace pal::detail
