"""Writes a dsbench --json result with the fields bench/gpu/bench.py report reads: decode at
`ms` per token reading `bytes` of weights per step (so weight bandwidth = bytes / ms).
  fake_dsbench.py OUT.json MS BYTES"""
import json
import sys

out, ms, weight_bytes = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
times = {"avg": ms, "p50": ms, "p90": ms, "p99": ms}
json.dump({"decode_ms": times, "prefill_ms": {"avg": 10 * ms, "p50": 10 * ms},
           "weight_bandwidth_bytes_per_s": weight_bytes / (ms / 1e3),
           "copy_bandwidth_bytes_per_s": 3.0e12, "bandwidth_fraction": 0.5,
           "device_name": "cuda:0 (fake)", "load_ms": 1.0,
           "weight_bytes_per_rank": weight_bytes, "decode_weight_bytes": weight_bytes},
          open(out, "w"))
