"""Writes a one-layer decoder in the ONNX text syntax (input ids in, logits out, no cache of
its own) whose attention has heads of any size: an embedding, a layer norm, Q/K/V
projections, GQA as transformers' repeat_kv, a causal and padding mask, O, a ReLU MLP and
the LM head. dsc gives it session programs, so a half --kv-cache-dtype runs its prompts on
the tensor cores' prefill kernel. The weights are seeded and scaled by 1/sqrt(fan-in), so
the logits stay near 1 whatever the head size.

    wide_decoder.py OUT.onnxtxt --heads 2 --kv-heads 1 --head-dim 512
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wide_attention import causal_padding_bias, grouped_attention, head_arguments  # noqa: E402,E501


def tensor(rng, name, rows, cols=None, around=0.0):
    shape = [rows] if cols is None else [rows, cols]
    count = rows * (cols or 1)
    bound = 1.0 if cols is None else math.sqrt(3.0 / rows)  # unit variance out
    values = ", ".join(f"{around + rng.uniform(-bound, bound) * (0.2 if around else 1):.4f}"
                       for _ in range(count))
    return f"float[{', '.join(map(str, shape))}] {name} = {{{values}}}"


def main():
    ap = head_arguments()
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    h, k, d, e, vocab = a.heads, a.kv_heads, a.head_dim, a.hidden, a.vocab
    rng = random.Random(a.seed)
    weights = [tensor(rng, "embed", vocab, e), tensor(rng, "ln1", e, around=1.0),
               tensor(rng, "wq", e, h * d), tensor(rng, "wk", e, k * d),
               tensor(rng, "wv", e, k * d), tensor(rng, "wo", h * d, e),
               tensor(rng, "ln2", e, around=1.0), tensor(rng, "w1", e, 2 * e),
               tensor(rng, "w2", 2 * e, e), tensor(rng, "lm_head", e, vocab)]
    parameters = ",\n   ".join(weights)
    text = f"""<ir_version: 8, opset_import: ["" : 18]>
g (int64[batch, sequence] input_ids, int64[batch, total_sequence] attention_mask,
   {parameters})
  => (float[batch, sequence, {vocab}] logits) {{
  qheads = Constant<value_ints = [0, 0, {h}, {d}]>()
  kvheads = Constant<value_ints = [0, 0, {k}, {d}]>()
{causal_padding_bias("input_ids")}  x = Gather<axis = 0>(embed, input_ids)
  a = LayerNormalization<axis = -1, epsilon = 1e-5>(x, ln1)
  q0 = MatMul(a, wq)
  q1 = Reshape(q0, qheads)
  qh = Transpose<perm = [0, 2, 1, 3]>(q1)
  k0 = MatMul(a, wk)
  k1 = Reshape(k0, kvheads)
  kh = Transpose<perm = [0, 2, 1, 3]>(k1)
  v0 = MatMul(a, wv)
  v1 = Reshape(v0, kvheads)
  vh = Transpose<perm = [0, 2, 1, 3]>(v1)
{grouped_attention(h, k, d, "kh", "vh", "o2")}  o3 = MatMul(o2, wo)
  r1 = Add(x, o3)
  b = LayerNormalization<axis = -1, epsilon = 1e-5>(r1, ln2)
  f0 = MatMul(b, w1)
  f1 = Relu(f0)
  f2 = MatMul(f1, w2)
  r2 = Add(r1, f2)
  logits = MatMul(r2, lm_head)
}}
"""
    with open(a.out, "w") as out:
        out.write(text)


if __name__ == "__main__":
    main()
