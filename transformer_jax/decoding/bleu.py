"""Corpus BLEU (Papineni et al. 2002) of detokenized text with sacreBLEU (Post 2018).

Two figures per decoding, each with sacreBLEU's signature:
- "bleu": sacreBLEU's default, the number to quote: mixed case, the 13a (mteval-v13a)
  tokenization applied by sacreBLEU itself to the detokenized hypotheses and the raw references.
- "bleu_lc": the same with `lowercase=True, tokenize="13a"`: case-insensitive tokenized BLEU,
  the setting of the published small-Transformer scores on Multi30k, which lowercase and tokenize
  before scoring (torchtext's bleu_score on spaCy tokens, multi-bleu.perl on Moses tokens).
  Their tokenizers split a little differently from 13a, so compare to within about a point.
"""

import dataclasses
from collections.abc import Sequence

import sacrebleu

# Metric name -> sacrebleu.metrics.BLEU options.
VARIANTS = {"bleu": {}, "bleu_lc": {"lowercase": True, "tokenize": "13a"}}


@dataclasses.dataclass(frozen=True)
class CorpusBleu:
    scores: dict[str, float]  # VARIANTS name -> BLEU in [0, 100]
    signatures: dict[str, str]  # VARIANTS name -> sacreBLEU signature


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> CorpusBleu:
    """BLEU of `hypotheses` against one reference each (same order), in every VARIANTS setting."""
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; BLEU needs one "
            "reference per hypothesis, in the same order"
        )
    scores, signatures = {}, {}
    for name, options in VARIANTS.items():
        metric = sacrebleu.metrics.BLEU(**options)
        scores[name] = float(metric.corpus_score(list(hypotheses), [list(references)]).score)
        signatures[name] = str(metric.get_signature())
    return CorpusBleu(scores, signatures)
