"""transformer_jax: the Transformer, taken apart into pluggable, tested Flax components.

Shape letters, one legend for the whole package. Arrays are named with their axes as a suffix
(`q_BTNH`), and einsum strings use the same letters in lower case:

  B  batch (examples or rows)          D  model width, d_model
  T  query / target length             F  feed-forward width, d_ff
  S  key / source length               H  head dimension, d_k = D / N
  L  cache or position-table length    N  query heads
  V  vocabulary                        K  key-value heads (K divides N)
  G  query heads per key-value head, N / K
  P  prompt length (decoding)          O  tokens generated after the prompt
  W  beams per example                 R  rows of a batched decoding step, B * W
  U  recurrent steps of a Universal Transformer
  I  frequency pairs of a sinusoidal or rotary table (D / 2 or H / 2)
  E  examples of a dataset split       Z  classes of a classifier
  J  offsets between positions (analysis of positional encodings)
  Y, X, C  image rows, columns and channels; M patches per image, Q = p * p * C values per patch
           (p the patch size; lower-case y, x the patch grid's rows and columns)

A `1` stands for a broadcast axis of size one (`cls_11D`). Dimensions outside this list are
spelled out in a shape comment instead of a suffix.
"""
