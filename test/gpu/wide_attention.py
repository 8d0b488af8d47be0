"""Writes an attention graph in the ONNX text syntax with heads of any size: q [b, s, H*D],
k and v [b, s, K*D] as inputs, a padding mask, past keys and values [b, K, p, D], GQA
(H/K query heads per KV head, repeated as transformers' repeat_kv), a causal additive bias,
scale 1/sqrt(D). Outputs the attention [b, s, H*D] and the presents.

    wide_attention.py OUT.onnxtxt --heads 4 --kv-heads 2 --head-dim 512
"""
import argparse


def causal_padding_bias(fresh_source):
    """The lines that compute `bias` [b, 1, s, total]: 0 where a query may attend a key
    (causal, and the key not padding), float min elsewhere, from `attention_mask` and the
    new tokens' count (axis 1 of `fresh_source`). Defines ax1, zero and one too."""
    return f"""  ax1 = Constant<value_ints = [1]>()
  zero = Constant<value_int = 0>()
  one = Constant<value_int = 1>()
  _m0 = Shape(attention_mask)
  total = Gather<axis = 0>(_m0, one)
  _m1 = Shape({fresh_source})
  fresh = Gather<axis = 0>(_m1, one)
  _m2 = Sub(total, fresh)
  _m3 = Range(_m2, total, one)
  rows = Unsqueeze(_m3, ax1)
  ax0 = Constant<value_ints = [0]>()
  _m4 = Range(zero, total, one)
  cols = Unsqueeze(_m4, ax0)
  ax12 = Constant<value_ints = [1, 2]>()
  _m5 = LessOrEqual(cols, rows)
  _m6 = Unsqueeze(attention_mask, ax12)
  _m7 = Cast<to = 9>(_m6)
  allowed = And(_m5, _m7)
  open = Constant<value_float = 0.0>()
  shut = Constant<value_float = -3.4028234663852886e+38>()
  bias = Where(allowed, open, shut)
"""


def grouped_attention(h, k, d, keys, values, out):
    """The lines from the query heads `qh` [b, h, s, d] and the key and value heads `keys`
    and `values` [b, k, total, d] (repeated h / k times, as transformers' repeat_kv) to
    `out` [b, s, h·d]: softmax(q·kᵀ / sqrt(d) + bias)·v, heads merged. Needs `bias`."""
    return f"""  ax2 = Constant<value_ints = [2]>()
  repeat = Constant<value_ints = [1, 1, {h // k}, 1, 1]>()
  grouped = Constant<value_ints = [0, {h}, -1, {d}]>()
  merged = Constant<value_ints = [0, 0, {h * d}]>()
  _t3 = Unsqueeze({keys}, ax2)
  _t4 = Expand(_t3, repeat)
  kr = Reshape(_t4, grouped)
  _t5 = Unsqueeze({values}, ax2)
  _t6 = Expand(_t5, repeat)
  vr = Reshape(_t6, grouped)
  scale = Constant<value_float = {d ** -0.5!r}>()
  _t7 = Transpose<perm = [0, 1, 3, 2]>(kr)
  _t8 = MatMul(qh, _t7)
  scores = Mul(_t8, scale)
  _t9 = Add(scores, bias)
  probs = Softmax<axis = -1>(_t9)
  _t10 = MatMul(probs, vr)
  _t11 = Transpose<perm = [0, 2, 1, 3]>(_t10)
  {out} = Reshape(_t11, merged)
"""


def head_arguments():
    """The output file and the head shape, as both generators take them."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--head-dim", type=int, required=True)
    return ap


def main():
    a = head_arguments().parse_args()
    h, k, d = a.heads, a.kv_heads, a.head_dim
    text = f"""<ir_version: 8, opset_import: ["" : 18]>
g (float[batch, sequence, {h * d}] q, float[batch, sequence, {k * d}] k,
   float[batch, sequence, {k * d}] v, int64[batch, total_sequence] attention_mask,
   float[batch, {k}, past_sequence, {d}] past_key, float[batch, {k}, past_sequence, {d}] past_value)
  => (float[batch, sequence, {h * d}] y, float[batch, {k}, total_sequence, {d}] present_key,
      float[batch, {k}, total_sequence, {d}] present_value) {{
  qheads = Constant<value_ints = [0, 0, {h}, {d}]>()
  kvheads = Constant<value_ints = [0, 0, {k}, {d}]>()
  _t0 = Reshape(q, qheads)
  qh = Transpose<perm = [0, 2, 1, 3]>(_t0)
  _t1 = Reshape(k, kvheads)
  kh = Transpose<perm = [0, 2, 1, 3]>(_t1)
  _t2 = Reshape(v, kvheads)
  vh = Transpose<perm = [0, 2, 1, 3]>(_t2)
  present_key = Concat<axis = 2>(past_key, kh)
  present_value = Concat<axis = 2>(past_value, vh)
{causal_padding_bias("q")}{grouped_attention(h, k, d, "present_key", "present_value", "y")}}}
"""
    with open(a.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
