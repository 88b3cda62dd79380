"""PyTorch peer for the CUDA attention benchmark: scaled_dot_product_attention with the flash backend on the
machine's torch, contiguous KV, the same shapes and the same byte / FLOP accounting as orchard_bench_cuda.
Prints one JSON object per line: kernel, dtype, shape, peer_value, unit, peer_backend[, peer_note]."""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, reps=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def run_sdpa(q, k, v, causal):
    """Flash backend with native GQA when it takes it; else KV expanded to the query heads (noted)."""
    for backend, gqa in ((SDPBackend.FLASH_ATTENTION, True), (SDPBackend.FLASH_ATTENTION, False),
                         (SDPBackend.EFFICIENT_ATTENTION, True)):
        kk, vv = k, v
        if not gqa and k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        try:
            with sdpa_kernel([backend]):
                fn = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=gqa)
                fn()
                torch.cuda.synchronize()
                ms = median_ms(fn)
            note = "" if gqa or k.shape[1] == q.shape[1] else "flash has no native GQA here: KV expanded to the query heads"
            return ms, str(backend).split(".")[-1].lower(), note
        except RuntimeError as e:  # backend refused these inputs
            last = str(e).splitlines()[0]
    raise RuntimeError(last)


def emit(kernel, dtype, shape, value, unit, backend, note):
    d = {"kernel": kernel, "dtype": dtype, "shape": shape, "peer_value": round(value, 4), "unit": unit,
         "peer_backend": backend}
    if note:
        d["peer_note"] = note
    print(json.dumps(d), flush=True)


def decode(batch, ctx, hq, hkv, d, dtype):
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    q = torch.randn(batch, hq, 1, d, device="cuda", dtype=dt)
    k = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=dt)
    v = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=dt)
    ms, backend, note = run_sdpa(q, k, v, False)
    # Same accounting as orchard: K and V once, q and out in f32.
    nbytes = 2.0 * batch * ctx * hkv * d * 2 + 2.0 * batch * hq * d * 4
    shape = f"batch={batch} ctx={ctx} q_heads={hq} kv_heads={hkv} head_dim={d}"
    emit("decode_attention", dtype, shape, nbytes / (ms * 1e-3) / 1e9, "GB/s", backend, note)


def prefill(seqs, length, hq, hkv, d, dtype):
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    q = torch.randn(seqs, hq, length, d, device="cuda", dtype=dt)
    k = torch.randn(seqs, hkv, length, d, device="cuda", dtype=dt)
    v = torch.randn(seqs, hkv, length, d, device="cuda", dtype=dt)
    ms, backend, note = run_sdpa(q, k, v, True)
    flops = 4.0 * d * (length * (length + 1) / 2.0) * hq * seqs
    shape = f"seqs={seqs} len={length} causal q_heads={hq} kv_heads={hkv} head_dim={d}"
    emit("prefill_attention", dtype, shape, flops / (ms * 1e-3) / 1e12, "TFLOP/s", backend, note)


def main():
    torch.manual_seed(0)
    print(json.dumps({"peer": "torch", "version": torch.__version__, "device": torch.cuda.get_device_name()}), flush=True)
    for args in ((64, 4096, 32, 8, 128, "bf16"), (1, 32768, 32, 8, 128, "bf16"), (64, 4096, 32, 8, 128, "f16"),
                 (8, 8192, 32, 8, 128, "bf16"), (64, 4096, 32, 4, 64, "bf16"), (16, 4096, 16, 2, 256, "bf16")):
        try:
            decode(*args)
        except Exception as e:  # report and go on: one refused shape must not hide the others
            print(json.dumps({"peer_error": f"decode {args}: {e}"}), flush=True)
    for args in ((8, 2048, 32, 8, 128, "bf16"), (8, 2048, 32, 8, 128, "f16"), (4, 4096, 32, 8, 128, "bf16"),
                 (8, 2048, 32, 8, 64, "bf16")):
        try:
            prefill(*args)
        except Exception as e:
            print(json.dumps({"peer_error": f"prefill {args}: {e}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
