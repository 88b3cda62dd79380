"""Adds peer_value (and peer_backend / peer_note) from the PyTorch peer's lines to orchard_bench_cuda's lines
with the same kernel, dtype and shape (default variant only). Usage: merge_peer.py ours.jsonl peer.jsonl"""
import json
import sys


def lines(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def main(ours_path, peer_path):
    peers = {(p["kernel"], p["dtype"], p["shape"]): p for p in lines(peer_path) if "peer_value" in p}
    for o in lines(ours_path):
        p = peers.get((o.get("kernel"), o.get("dtype"), o.get("shape")))
        if p is not None and "variant" not in o:
            o["peer_value"] = p["peer_value"]
            o["peer_backend"] = p["peer_backend"]
            o["vs_peer"] = round(o["value"] / p["peer_value"], 3)
            if "peer_note" in p:
                o["peer_note"] = p["peer_note"]
        print(json.dumps(o))
    for p in lines(peer_path):
        if "peer_value" not in p:
            print(json.dumps(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
