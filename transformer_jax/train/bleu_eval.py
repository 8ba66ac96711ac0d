"""BLEU during and after training (the "bleu" block of train.evaluators, `enabled=True`):
decoded translations scored by sacreBLEU. Its block's options (config/eval_blocks.py):

Every evaluation decodes the first `examples` examples (all when 0) of each of the block's
`splits` (default: validation) greedily: validation/bleu_greedy and validation/bleu_lc_greedy
(see transformer_jax.decoding.bleu for the two BLEU settings). The last evaluation also decodes
the whole test split from the final parameters, by beam search (`beam_size`, `beam_alpha`; the
paper: 4 and 0.6) and greedily, so both decodings of the same model are reported: test/bleu_beam,
test/bleu_lc_beam, test/bleu_greedy, test/bleu_lc_greedy. It writes, one line per test example
in test order:

  translations/test.txt         beam-search outputs (the test BLEU), detokenized
  translations/test.greedy.txt  greedy outputs
  translations/test.ref.txt     references (raw target text)
  translations/test.src.txt     sources (raw source text)

so anyone can rescore them (`sacrebleu translations/test.ref.txt < translations/test.txt`).
"""

from pathlib import Path

from transformer_jax import data, decoding
from transformer_jax.decoding.bleu import corpus_bleu
from transformer_jax.decoding.text import decode_to_text
from transformer_jax.run_dir import TRANSLATIONS_DIR
from transformer_jax.train import multihost
from transformer_jax.train.timing import Phases


def check_splits(info: data.DatasetInfo) -> None:
    """A ValueError unless the data has the validation and test splits BLEU decodes."""
    if not {"validation", "test"} <= set(info.eval_splits):
        raise ValueError(
            f"train.evaluators.bleu.enabled=True needs validation and test splits; dataset "
            f"{info.name!r} has {list(info.eval_splits)}. Set train.evaluators.bleu.enabled=False"
        )


def splits(info: data.DatasetInfo) -> tuple[str, ...]:
    """The splits the block's `splits` may name: every evaluation split but the test split,
    which the last evaluation decodes whole."""
    return tuple(split for split in info.eval_splits if split != "test")


def generate_fns(model, block: dict, info: data.DatasetInfo, batch_size: int) -> dict:
    """strategy -> the jitted `fn(variables, inputs_BS, rng)` that decodes the evaluation's
    batches (transformer_jax.decoding), greedy and beam (the block's beam_size and beam_alpha),
    up to the test split's target length; compiled on first use, once: every eval batch has the
    test split's input shape, `input_shape(...)`."""
    target_len = info.padded_lengths("test")[1]
    decode = {
        "greedy": decoding.DecodeConfig("greedy", max_new_tokens=target_len),
        "beam": decoding.DecodeConfig(
            "beam",
            beam_size=block["beam_size"],
            alpha=block["beam_alpha"],
            max_new_tokens=target_len,
        ),
    }
    shape = input_shape(info, batch_size)
    return {name: decoding.make_generate_fn(model, c, shape) for name, c in decode.items()}


def input_shape(info: data.DatasetInfo, batch_size: int) -> tuple[int, int]:
    """(rows, tokens) of the source batches the evaluation decodes: the test split's."""
    return batch_size, info.padded_lengths("test")[0]


class BleuEvaluator:
    """The "bleu" evaluator (train/evaluators.py): BLEU metrics added to each evaluation's
    results; see the module docstring."""

    name = "bleu"
    at_end = True  # the last evaluation decodes the test split and writes the translations

    def __init__(
        self,
        dataset: data.Dataset,
        batch_size: int,
        block: dict,
        model,
        workdir: Path,
        parallel,
        phases: Phases,
    ):
        info = dataset.info
        check_splits(info)
        limits = {split: block["examples"] or None for split in block["splits"] or ["validation"]}
        limits["test"] = None  # the last evaluation's, always whole
        self._batches = {
            split: dataset.eval_batches(split, batch_size=batch_size, max_examples=n)
            for split, n in limits.items()
        }
        self._pairs = {
            split: dataset.text_pairs(split, max_examples=n) for split, n in limits.items()
        }
        # Compiled on first use, once: every eval batch has the same shape.
        self._generate = generate_fns(model, block, info, batch_size)
        self._tokenizer = info.tokenizer
        self._out = Path(workdir) / TRANSLATIONS_DIR
        self._summary = {"beam_size": block["beam_size"], "beam_alpha": block["beam_alpha"]}
        self._parallel, self._phases = parallel, phases

    def _score(self, split: str, strategy: str, variables) -> tuple[list[str], dict[str, float]]:
        texts = decode_to_text(
            self._generate[strategy], variables, self._batches[split], self._tokenizer
        )
        bleu = corpus_bleu(texts, [target for _, target in self._pairs[split]])
        self._summary["signatures"] = bleu.signatures
        return texts, {f"{name}_{strategy}": score for name, score in bleu.scores.items()}

    def evaluate(self, state, results: dict[str, dict[str, float]], *, final: bool) -> None:
        """Adds the BLEU metrics of `state` (placed as the run's) to `results` (split ->
        metrics); `final` also decodes the test split and writes the translations."""
        with self._phases("decode"):
            self._evaluate(self._parallel.host_state(state), results, final=final)

    def _evaluate(self, state, results: dict[str, dict[str, float]], *, final: bool) -> None:
        variables = state.variables
        for split in self._batches:
            if split != "test":
                results.setdefault(split, {}).update(self._score(split, "greedy", variables)[1])
        if not final:
            return
        sources, references = zip(*self._pairs["test"], strict=True)
        files = {"test.src.txt": sources, "test.ref.txt": references}
        for strategy, name in (("beam", "test.txt"), ("greedy", "test.greedy.txt")):
            files[name], metrics = self._score("test", strategy, variables)
            results.setdefault("test", {}).update(metrics)
        if multihost.is_primary():  # Every process decoded the same text; one writes it.
            self._out.mkdir(parents=True, exist_ok=True)
            for name, lines in files.items():
                text = "".join(line + "\n" for line in lines)
                (self._out / name).write_text(text, encoding="utf-8")
        self._summary["translations"] = f"{TRANSLATIONS_DIR}/test.txt"

    def summary_fields(self) -> dict:
        """summary.json's extras["bleu"]: the decoding settings, sacreBLEU signatures and the
        translations file."""
        return dict(self._summary)
