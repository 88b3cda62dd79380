// Sampling on the GPU (pie/src/backend/cuda/cuda_sampling.cpp), compiled at run time by NVRTC: one block
// per row to sample, following Sampler::sample (pie/src/sampling/sampler.cpp) step by step:
//   1. the row's logits copied to a work row (a logits row may serve several samples), then the
//      repetition penalty on the distinct prompt + output tokens, frequency and presence penalties on the
//      output tokens' counts, the logit bias in request order, and the grammar's mask (-inf);
//   2. the maximum and best token (lowest id on ties), a NaN or +inf logit reported as the CPU reports it;
//   3. temperature 0: the best token; else the weights exp((l - max) / T) and what top-k, top-p and min-p
//      keep of them, walked in the CPU's order (best first where the CPU keeps a sorted candidate list,
//      id order where it keeps dense weights), at the host's draw u;
//   4. the logprob (log-softmax of the processed logits) and the top_logprobs best, when asked.
// The k best are found by a radix select on an order-preserving integer key (4 passes of 8 bits, no sort
// of the vocabulary) and sorted in shared memory; a wide top-p nucleus by the same descent weighted by
// the tokens' weights. Sums are in double, in another order than the CPU's: their last bits may differ.

#define THREADS 1024
#define WARPS (THREADS / 32)
#define MAXC 1024     // candidates sorted in shared memory (kDeviceMaxTopK)
#define PROBE 64      // the CPU's kNucleusProbe
#define MAX_TOP 20
#define FULL 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)
#define POS_INF __int_as_float(0x7f800000)
#define MIN_NORMAL 1.17549435e-38f  // the CPU's exp flushes weights below this to 0

// Laid out as cuda_sampling.cpp's SampleRowDesc / SampleRowOut.
struct SampleRowDesc {
  double u;
  long long logits_row;
  long long mask_off;  // first word of the row's mask in masks; -1: none
  int n_words;
  int rep_off, rep_n;    // distinct penalized tokens: ints[rep_off, rep_off + rep_n)
  int cnt_off, cnt_n;    // (token, count) pairs: ints[cnt_off + 2 j], ints[cnt_off + 2 j + 1]
  int bias_off, bias_n;  // (token, bias's float bits) pairs
  int top_k;             // 0: off
  int top_logprobs;
  int want_logprob;
  float temperature, top_p, min_p, rep, freq, pres;
};

struct SampleRowOut {
  int status;  // 0 ok, 1 NaN or +inf logit (bad_token, bad_value), 2 every allowed token -inf
  int token;
  int bad_token;
  int n_top;
  float logprob;
  float bad_value;
  int top_ids[MAX_TOP];
  float top_lp[MAX_TOP];
};

// An unsigned key in the order of the float (no NaN); -0 and +0 are one value, as the CPU compares them.
__device__ __forceinline__ unsigned key_of(float f) {
  const unsigned u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The CPU's order of candidates: larger logit first, lower id on ties.
__device__ __forceinline__ bool better(float la, int ia, float lb, int ib) {
  return la > lb || (la == lb && ia < ib);
}

// exp((l - max) * inv_t), 0 below the smallest normal float and below floor (as the CPU's exp_shifted).
__device__ __forceinline__ float weight_of(float l, float max, float inv_t, float floor) {
  const float e = expf((l - max) * inv_t);
  return (e < MIN_NORMAL || e < floor) ? 0.0f : e;
}

struct Shared {
  float cl[MAXC];  // candidates: logit, id, weight
  int ci[MAXC];
  float cw[MAXC];
  unsigned hist[256];
  double hist_mass[256];
  float red_f[WARPS];
  int red_i[WARPS];
  double red_d[WARPS];
  int count;
  int pick;
  int digit;
  int remaining;
  int eq_total;
  double mass_before;
};

__device__ double block_sum_d(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
  if (lane == 0) sh.red_d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = sh.red_d[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    if (lane == 0) sh.red_d[0] = v;
  }
  __syncthreads();
  const double r = sh.red_d[0];
  __syncthreads();
  return r;
}

__device__ int block_sum_i(int v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
  if (lane == 0) sh.red_i[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = sh.red_i[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL, v, o);
    if (lane == 0) sh.red_i[0] = v;
  }
  __syncthreads();
  const int r = sh.red_i[0];
  __syncthreads();
  return r;
}

__device__ int block_min_i(int v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(FULL, v, o));
  if (lane == 0) sh.red_i[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = sh.red_i[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(FULL, v, o));
    if (lane == 0) sh.red_i[0] = v;
  }
  __syncthreads();
  const int r = sh.red_i[0];
  __syncthreads();
  return r;
}

// The best (logit, id) of the block: largest logit, lowest id on ties.
__device__ void block_best(float& l, int& id, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ol = __shfl_down_sync(FULL, l, o);
    const int oi = __shfl_down_sync(FULL, id, o);
    if (better(ol, oi, l, id)) l = ol, id = oi;
  }
  if (lane == 0) sh.red_f[warp] = l, sh.red_i[warp] = id;
  __syncthreads();
  if (warp == 0) {
    l = sh.red_f[lane];
    id = sh.red_i[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ol = __shfl_down_sync(FULL, l, o);
      const int oi = __shfl_down_sync(FULL, id, o);
      if (better(ol, oi, l, id)) l = ol, id = oi;
    }
    if (lane == 0) sh.red_f[0] = l, sh.red_i[0] = id;
  }
  __syncthreads();
  l = sh.red_f[0];
  id = sh.red_i[0];
  __syncthreads();
}

// Exclusive prefix count of `flag` over the block in thread order; *total the count of all.
__device__ int block_rank(bool flag, Shared& sh, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned b = __ballot_sync(FULL, flag);
  if (lane == 0) sh.red_i[warp] = __popc(b);
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < WARPS; ++w) {
    const int c = sh.red_i[w];
    before += w < warp ? c : 0;
    all += c;
  }
  __syncthreads();
  *total = all;
  return before + __popc(b & ((1u << lane) - 1u));
}

// Exclusive prefix sum of v over the block in thread order; *total the sum of all.
__device__ double block_scan_d(double v, Shared& sh, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(FULL, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sh.red_d[warp] = x;
  __syncthreads();
  if (warp == 0) {
    double w = sh.red_d[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(FULL, w, o);
      if (lane >= o) w += y;
    }
    sh.red_d[lane] = w;
  }
  __syncthreads();
  const double before = warp > 0 ? sh.red_d[warp - 1] : 0.0;
  *total = sh.red_d[WARPS - 1];
  __syncthreads();
  return before + x - v;
}

// The m best tokens (logit > -inf; m at most their number and MAXC) into sh.cl / sh.ci, sorted best first.
// A radix select finds the m-th best key; ties at it are taken lowest id first.
__device__ int select_best(const float* w, int n, int m, Shared& sh) {
  const int tid = threadIdx.x;
  unsigned prefix = 0, pmask = 0;
  int remaining = m;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = tid; d < 256; d += THREADS) sh.hist[d] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += THREADS) {
      const float l = w[i];
      if (l > NEG_INF) {
        const unsigned k = key_of(l);
        if ((k & pmask) == prefix) atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
      }
    }
    __syncthreads();
    if (tid == 0) {
      int d = 255, r = remaining;
      for (; d > 0; --d) {
        if (static_cast<int>(sh.hist[d]) >= r) break;
        r -= static_cast<int>(sh.hist[d]);
      }
      sh.digit = d;
      sh.remaining = r;
      sh.eq_total = static_cast<int>(sh.hist[d]);
      sh.count = 0;
    }
    __syncthreads();
    prefix |= static_cast<unsigned>(sh.digit) << shift;
    pmask |= 255u << shift;
    remaining = sh.remaining;
    __syncthreads();
  }
  const int take_eq = remaining, eq_total = sh.eq_total;
  if (take_eq >= eq_total) {  // every tie is taken: no order needed
    for (int i = tid; i < n; i += THREADS) {
      const float l = w[i];
      if (l > NEG_INF && key_of(l) >= prefix) {
        const int p = atomicAdd(&sh.count, 1);
        sh.cl[p] = l;
        sh.ci[p] = i;
      }
    }
  } else {  // the lowest ids of the ties: ranked in id order, a tile of THREADS ids at a time
    int eq_before = 0;
    for (int base = 0; base < n; base += THREADS) {
      const int i = base + tid;
      const float l = i < n ? w[i] : NEG_INF;
      const bool valid = l > NEG_INF;
      const unsigned k = valid ? key_of(l) : 0u;
      const bool eq = valid && k == prefix;
      int tile_eq = 0;
      const int r = block_rank(eq, sh, &tile_eq);
      if ((valid && k > prefix) || (eq && eq_before + r < take_eq)) {
        const int p = atomicAdd(&sh.count, 1);
        sh.cl[p] = l;
        sh.ci[p] = i;
      }
      eq_before += tile_eq;
      if (eq_before >= take_eq && base + THREADS < n) {
        // The rest holds no tie to take: only better keys.
        for (int j = base + THREADS + tid; j < n; j += THREADS) {
          const float lj = w[j];
          if (lj > NEG_INF && key_of(lj) > prefix) {
            const int p = atomicAdd(&sh.count, 1);
            sh.cl[p] = lj;
            sh.ci[p] = j;
          }
        }
        break;
      }
    }
  }
  __syncthreads();
  const int count = sh.count;
  // Bitonic sort, best first; padding sorts last.
  int p2 = 1;
  while (p2 < count) p2 <<= 1;
  for (int i = count + tid; i < p2; i += THREADS) sh.cl[i] = NEG_INF, sh.ci[i] = 0x7fffffff;
  __syncthreads();
  for (int k = 2; k <= p2; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < p2; i += THREADS) {
        const int o = i ^ j;
        if (o > i) {
          const bool first_better = better(sh.cl[i], sh.ci[i], sh.cl[o], sh.ci[o]);
          if (((i & k) == 0) != first_better) {
            const float tl = sh.cl[i];
            const int ti = sh.ci[i];
            sh.cl[i] = sh.cl[o], sh.ci[i] = sh.ci[o];
            sh.cl[o] = tl, sh.ci[o] = ti;
          }
        }
      }
      __syncthreads();
    }
  }
  return count;
}

// Sparse draw over sh's sorted candidates [0, m) with weights sh.cw (0: dropped), as Sampler::pick.
__device__ int pick_sorted(int m, double total, double u, Shared& sh) {
  const double target = u * total;
  double cum = 0;
  int chosen = sh.ci[0];
  for (int j = 0; j < m; ++j) {
    if (sh.cw[j] == 0.0f) continue;
    cum += static_cast<double>(sh.cw[j]);
    chosen = sh.ci[j];
    if (cum > target) break;
  }
  return chosen;
}

// Whether token i (logit l) is in a wide nucleus ending at (cut key, cut id).
__device__ __forceinline__ bool in_nucleus(float l, int i, bool use_cut, unsigned cut_key, int cut_id) {
  if (!use_cut) return true;
  const unsigned k = key_of(l);
  return k > cut_key || (k == cut_key && i <= cut_id);
}

// Dense draw in id order over the weights (floor min_p; a nucleus when use_cut), as pick_weighted: the
// first token where the running sum passes u * total, or the last positive weight when rounding leaves
// it unreached. Each thread sums a contiguous chunk of ids; the chunk where the sum passes is walked.
__device__ int pick_dense(const float* w, int n, float max, float inv_t, float min_p, bool use_cut, unsigned cut_key,
                          int cut_id, double u, Shared& sh) {
  const int tid = threadIdx.x;
  const int chunk = (n + THREADS - 1) / THREADS;
  const int begin = min(n, tid * chunk), end = min(n, begin + chunk);
  double sum = 0;
  for (int i = begin; i < end; ++i) {
    const float l = w[i];
    if (l > NEG_INF && in_nucleus(l, i, use_cut, cut_key, cut_id)) sum += weight_of(l, max, inv_t, min_p);
  }
  double total = 0;
  const double before = block_scan_d(sum, sh, &total);
  const double target = u * total;
  if (tid == 0) sh.pick = THREADS, sh.digit = -1;
  __syncthreads();
  if (sum > 0 && before + sum > target) atomicMin(&sh.pick, tid);
  if (sum > 0) atomicMax(&sh.digit, tid);  // the last chunk with weight
  __syncthreads();
  const bool reached = sh.pick < THREADS;
  const int owner = reached ? sh.pick : sh.digit;
  if (tid == owner) {
    double cum = reached ? before : __longlong_as_double(0xfff0000000000000LL);  // -inf: the last weight
    int chosen = begin;
    for (int i = begin; i < end; ++i) {
      const float l = w[i];
      if (!(l > NEG_INF) || !in_nucleus(l, i, use_cut, cut_key, cut_id)) continue;
      const float wi = weight_of(l, max, inv_t, min_p);
      if (wi <= 0.0f) continue;
      chosen = i;
      cum += static_cast<double>(wi);
      if (cum > target) break;
    }
    sh.pick = chosen;
  }
  __syncthreads();
  const int r = sh.pick;
  __syncthreads();
  return r;
}

extern "C" __global__ void __launch_bounds__(THREADS) sample_rows(const float* logits, int n, const SampleRowDesc* descs,
                                                                  const int* ints, const unsigned* masks, float* work,
                                                                  SampleRowOut* outs) {
  __shared__ Shared sh;
  const int tid = threadIdx.x;
  const SampleRowDesc d = descs[blockIdx.x];
  const float* in = logits + d.logits_row * static_cast<long long>(n);
  float* w = work + static_cast<long long>(blockIdx.x) * n;
  SampleRowOut* out = outs + blockIdx.x;

  // 1. Processed logits: penalties, bias, then the mask.
  for (int i = tid; i < n; i += THREADS) w[i] = in[i];
  __syncthreads();
  for (int j = tid; j < d.rep_n; j += THREADS) {  // distinct tokens: no two threads touch one
    const int t = ints[d.rep_off + j];
    const float l = w[t];
    w[t] = l > 0.0f ? l / d.rep : l * d.rep;
  }
  __syncthreads();
  for (int j = tid; j < d.cnt_n; j += THREADS) {
    const int t = ints[d.cnt_off + 2 * j];
    const int c = ints[d.cnt_off + 2 * j + 1];
    w[t] -= __fadd_rn(__fmul_rn(static_cast<float>(c), d.freq), d.pres);  // unfused, as the CPU rounds
  }
  __syncthreads();
  if (tid == 0) {  // in request order: a token biased twice adds twice, as on the CPU
    for (int j = 0; j < d.bias_n; ++j) {
      w[ints[d.bias_off + 2 * j]] += __int_as_float(ints[d.bias_off + 2 * j + 1]);
    }
  }
  __syncthreads();

  // 2. The mask, the maximum and best token, bad logits, and how many tokens are above -inf.
  float best_l = NEG_INF;
  int best_i = 0x7fffffff, bad = 0x7fffffff, valid = 0;
  const unsigned* mask = d.mask_off >= 0 ? masks + d.mask_off : nullptr;
  for (int i = tid; i < n; i += THREADS) {
    float l = w[i];
    if (mask != nullptr && (i / 32 >= d.n_words || ((mask[i / 32] >> (i % 32)) & 1u) == 0u)) {
      l = NEG_INF;
      w[i] = l;
    }
    if (!(l < POS_INF)) bad = min(bad, i);
    if (l > best_l) best_l = l, best_i = i;
    valid += l > NEG_INF ? 1 : 0;
  }
  bad = block_min_i(bad, sh);
  block_best(best_l, best_i, sh);
  valid = block_sum_i(valid, sh);
  if (bad != 0x7fffffff) {
    if (tid == 0) {
      out->status = 1;
      out->bad_token = bad;
      out->bad_value = w[bad];
      out->token = -1;
      out->n_top = 0;
    }
    return;
  }
  if (!(best_l > NEG_INF)) {
    if (tid == 0) {
      out->status = 2;
      out->token = -1;
      out->n_top = 0;
    }
    return;
  }
  const float max = best_l;

  // 3. The token.
  int token = best_i;
  if (d.temperature > 0.0f) {
    const float inv_t = 1.0f / d.temperature;
    const bool use_k = d.top_k > 0 && d.top_k < n;
    const bool use_p = d.top_p < 1.0f;
    if (!use_k && !use_p) {
      token = pick_dense(w, n, max, inv_t, d.min_p, false, 0u, 0, d.u, sh);
    } else {
      // The sorted candidates: top_k's, or the nucleus probe's.
      double need = 0;
      if (!use_k) {
        double s = 0;
        for (int i = tid; i < n; i += THREADS) s += weight_of(w[i], max, inv_t, 0.0f);
        need = static_cast<double>(d.top_p) * block_sum_d(s, sh);
      }
      const int m = select_best(w, n, min(min(use_k ? d.top_k : PROBE, MAXC), valid), sh);
      for (int j = tid; j < m; j += THREADS) {
        sh.cw[j] = use_k ? expf((sh.cl[j] - max) * inv_t) : weight_of(sh.cl[j], max, inv_t, 0.0f);
      }
      __syncthreads();
      if (tid == 0) {
        int kept = m;
        bool found = use_k;
        if (use_k) {
          double total = 0;
          for (int j = 0; j < m; ++j) total += static_cast<double>(sh.cw[j]);
          if (use_p) {
            const double need_k = static_cast<double>(d.top_p) * total;
            double cum = 0;
            for (int j = 0; j < m; ++j) {
              cum += static_cast<double>(sh.cw[j]);
              if (cum >= need_k) {
                kept = j + 1;
                break;
              }
            }
          }
        } else {
          double cum = 0;
          for (int j = 0; j < m && !found; ++j) {
            cum += static_cast<double>(sh.cw[j]);
            if (cum >= need) kept = j + 1, found = true;
          }
        }
        sh.remaining = found ? 1 : 0;
        if (found) {
          double total = 0;
          for (int j = 0; j < kept; ++j) {
            if (sh.cw[j] >= d.min_p) {
              total += static_cast<double>(sh.cw[j]);
            } else {
              sh.cw[j] = 0.0f;
            }
          }
          sh.pick = pick_sorted(kept, total, d.u, sh);
        }
      }
      __syncthreads();
      const bool found = sh.remaining != 0;
      token = sh.pick;
      __syncthreads();
      if (!found) {
        // A wide nucleus: the token where the running weight (best first) reaches need, found by a radix
        // descent on the key weighted by the tokens' weights, then the ties at its key in id order.
        unsigned prefix = 0, pmask = 0;
        if (tid == 0) sh.mass_before = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
          for (int b = tid; b < 256; b += THREADS) sh.hist_mass[b] = 0, sh.hist[b] = 0;
          __syncthreads();
          for (int i = tid; i < n; i += THREADS) {
            const float l = w[i];
            const float wi = l > NEG_INF ? weight_of(l, max, inv_t, 0.0f) : 0.0f;
            if (wi > 0.0f) {
              const unsigned k = key_of(l);
              if ((k & pmask) == prefix) {
                atomicAdd(&sh.hist_mass[(k >> shift) & 255u], static_cast<double>(wi));
                atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
              }
            }
          }
          __syncthreads();
          if (tid == 0) {
            double before = sh.mass_before;
            int chosen = -1, last = 0;
            for (int b = 255; b >= 0; --b) {
              if (sh.hist[b] == 0u) continue;
              last = b;
              if (before + sh.hist_mass[b] >= need) {
                chosen = b;
                break;
              }
              before += sh.hist_mass[b];
            }
            if (chosen < 0) {  // rounding left need unreached: the nucleus is every weighted token
              chosen = last;
              before -= sh.hist_mass[last];
            }
            sh.digit = chosen;
            sh.mass_before = before;
            sh.eq_total = static_cast<int>(sh.hist[chosen]);
          }
          __syncthreads();
          prefix |= static_cast<unsigned>(sh.digit) << shift;
          pmask |= 255u << shift;
          __syncthreads();
        }
        // Ties at the cut's key share one weight: how many of them (in id order) reach need.
        int cut_id = 0x7fffffff;
        if (tid == 0) {
          const float wk = weight_of(__uint_as_float((prefix & 0x80000000u) ? (prefix & 0x7fffffffu) : ~prefix), max,
                                     inv_t, 0.0f);
          double cum = sh.mass_before;
          int t = 0;
          while (t < sh.eq_total && cum < need) cum += static_cast<double>(wk), ++t;
          sh.remaining = t < 1 ? 1 : t;
        }
        __syncthreads();
        const int take = sh.remaining, eq_total = sh.eq_total;
        __syncthreads();
        if (take < eq_total) {
          int eq_before = 0;
          if (tid == 0) sh.pick = 0x7fffffff;
          __syncthreads();
          for (int base = 0; base < n && eq_before < take; base += THREADS) {
            const int i = base + tid;
            const float l = i < n ? w[i] : NEG_INF;
            const bool eq = l > NEG_INF && key_of(l) == prefix && weight_of(l, max, inv_t, 0.0f) > 0.0f;
            int tile_eq = 0;
            const int r = block_rank(eq, sh, &tile_eq);
            if (eq && eq_before + r == take - 1) sh.pick = i;
            eq_before += tile_eq;
          }
          __syncthreads();
          cut_id = sh.pick;
          __syncthreads();
        }
        token = pick_dense(w, n, max, inv_t, d.min_p, true, prefix, cut_id, d.u, sh);
      }
    }
  }

  // 4. Logprobs: log-softmax of the processed logits.
  float logprob = 0.0f;
  int n_top = 0;
  if (d.want_logprob || d.top_logprobs > 0) {
    double s = 0;
    for (int i = tid; i < n; i += THREADS) s += weight_of(w[i], max, 1.0f, 0.0f);
    const double lse = static_cast<double>(max) + log(block_sum_d(s, sh));
    logprob = static_cast<float>(static_cast<double>(w[token]) - lse);
    if (d.top_logprobs > 0) {
      n_top = select_best(w, n, min(min(d.top_logprobs, MAX_TOP), valid), sh);
      for (int j = tid; j < n_top; j += THREADS) {
        out->top_ids[j] = sh.ci[j];
        out->top_lp[j] = static_cast<float>(static_cast<double>(sh.cl[j]) - lse);
      }
    }
  }
  if (tid == 0) {
    out->status = 0;
    out->token = token;
    out->logprob = logprob;
    out->n_top = n_top;
    out->bad_token = -1;
    out->bad_value = 0.0f;
  }
}
