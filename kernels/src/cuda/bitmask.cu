// Applies a token bitmask to logits: logits[r][t] = -inf where bit t % 32 of word t / 32 of row r's mask is 0,
// and for every t >= n_mask_tokens (a padded vocabulary: rows of the logits longer than the mask's
// vocabulary). One thread per 8 logits (two 16-byte accesses and one mask byte); the vector path needs a
// row length that is a multiple of 4, other lengths take the scalar path.

extern "C" __global__ void __launch_bounds__(256) apply_bitmask(float* logits,          // [n_rows][vocab]
                                                                const unsigned* mask,   // [n_rows][mask_words]
                                                                int n_rows, int vocab, int mask_words,
                                                                int n_mask_tokens) {
  const int row = blockIdx.y;
  const long long base = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (base >= vocab) return;
  float* x = logits + static_cast<long long>(row) * vocab;
  const unsigned* m = mask + static_cast<long long>(row) * mask_words;
  const int b = static_cast<int>(base);
  unsigned bits = 0;  // bit i: token b + i allowed
  if (b < n_mask_tokens) {
    bits = (__ldg(m + (b >> 5)) >> (b & 31)) & 0xffu;
    const int left = n_mask_tokens - b;
    if (left < 8) bits &= (1u << left) - 1u;
  }
  const float ninf = -__int_as_float(0x7f800000);
  if ((vocab & 3) == 0 && b + 8 <= vocab) {
    if (bits == 0xffu) return;  // all eight allowed: nothing to write
    float4* v = reinterpret_cast<float4*>(x + b);
    float4 lo = v[0], hi = v[1];
    if (!(bits & 0x01u)) lo.x = ninf;
    if (!(bits & 0x02u)) lo.y = ninf;
    if (!(bits & 0x04u)) lo.z = ninf;
    if (!(bits & 0x08u)) lo.w = ninf;
    if (!(bits & 0x10u)) hi.x = ninf;
    if (!(bits & 0x20u)) hi.y = ninf;
    if (!(bits & 0x40u)) hi.z = ninf;
    if (!(bits & 0x80u)) hi.w = ninf;
    v[0] = lo;
    v[1] = hi;
  } else {
    const int end = min(b + 8, vocab);
    for (int t = b; t < end; ++t) {
      if (!((bits >> (t - b)) & 1u)) x[t] = ninf;
    }
  }
}
