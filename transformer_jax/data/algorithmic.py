"""Generators of the algorithmic sequence-to-sequence tasks, vectorised with numpy.

Tasks follow the Universal Transformer paper (Dehghani et al., 2019, Sec. 3.3: copy, reverse,
addition) and the "arithmetic as a language" homework (NTHU): `addition` maps "123+45" to
"168". Token ids exclude EOS; the pipeline appends it. Symbol k of a task's alphabet is the id
the task's tokenizer, a CharTokenizer of that alphabet, gives it (`CharTokenizer.FIRST_ID + k`):
the examples are written in its vocabulary layout, which declares the special ids below it.

Two variants (`data.variant`): "default", the layout above, and "t2t", the generators of
tensor2tensor's algorithmic_{identity,reverse,addition}_decimal40 problems that the UT paper
trained on (`t2t_examples`).
"""

from typing import Literal

import numpy as np

from transformer_jax.data.tokenizers import CharTokenizer

Task = Literal["copy", "reverse", "sort", "addition"]
TASKS: tuple[str, ...] = ("copy", "reverse", "sort", "addition")
VARIANTS = ("default", "t2t")
T2T_TASKS = ("copy", "reverse", "addition")  # tensor2tensor's identity, reverse, addition

ADDITION_ALPHABET = "0123456789+"  # digit d is token id 3 + d, "+" is id 13.
_FIRST_ID = CharTokenizer.FIRST_ID  # the id of an alphabet's first symbol
_PLUS_ID = _FIRST_ID + ADDITION_ALPHABET.index("+")

Example = tuple[np.ndarray, np.ndarray]  # (inputs int32 [Li], targets int32 [Lt])


def max_lengths(task: Task, longest: int, variant: str = "default") -> tuple[int, int]:
    """(max input tokens, max target tokens incl. EOS) when sequences have <= `longest` symbols.

    For addition `longest` counts digits per operand: input "a+b" has <= 2 * longest + 1
    tokens, the sum <= longest + 1 digits. In the t2t variant it counts input tokens: the
    operands have l1 <= longest // 2 and l2 <= longest - l1 - 1 digits, so the sum has at most
    longest - 1 digits (l1 = 1), longest tokens with EOS.
    """
    if task == "addition":
        return (longest, longest) if variant == "t2t" else (2 * longest + 1, longest + 2)
    return longest, longest + 1


def _symbol_examples(
    task: Task, rng: np.random.Generator, n: int, min_len: int, max_len: int, num_symbols: int
) -> list[Example]:
    lengths = rng.integers(min_len, max_len + 1, size=n)
    tokens_EL = rng.integers(0, num_symbols, size=(n, max_len)).astype(np.int32) + _FIRST_ID
    examples = []
    for row, length in zip(tokens_EL, lengths, strict=True):
        x = row[:length]
        if task == "copy":
            y = x.copy()
        elif task == "reverse":
            y = x[::-1].copy()
        else:  # sort
            y = np.sort(x)
        examples.append((x.copy(), y))
    return examples


def _random_numbers(rng: np.random.Generator, n: int, min_len: int, max_len: int) -> tuple:
    """Digits of n random numbers with min_len..max_len digits, least significant first.

    Returns (digits int64 [n, max_len] zero beyond each length, lengths int64 [n]). The leading
    digit is non-zero for multi-digit numbers so the digit count is exact.
    """
    lengths = rng.integers(min_len, max_len + 1, size=n)
    return _random_digits(rng, lengths, max_len), lengths


def _random_digits(rng: np.random.Generator, lengths: np.ndarray, max_len: int) -> np.ndarray:
    """int64 [n, max_len]: numbers of `lengths` digits, least significant first, zero beyond."""
    n = len(lengths)
    digits_EL = rng.integers(0, 10, size=(n, max_len))
    cols = np.arange(max_len)
    digits_EL = np.where(cols[None, :] < lengths[:, None], digits_EL, 0)
    leading = rng.integers(1, 10, size=n)
    multi = lengths > 1
    digits_EL[multi, lengths[multi] - 1] = leading[multi]
    return digits_EL


def _column_sum(a_EL: np.ndarray, b_EL: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Schoolbook addition of least-significant-first digits, one column at a time over all
    examples at once. -> (sum digits int64 [n, L + 1], digit counts int64 [n], >= 1)."""
    n, width = a_EL.shape
    sum_EL = np.zeros((n, width + 1), dtype=np.int64)
    carry = np.zeros(n, dtype=np.int64)
    for col in range(width):
        total = a_EL[:, col] + b_EL[:, col] + carry
        sum_EL[:, col], carry = total % 10, total // 10
    sum_EL[:, width] = carry
    # Digit count = 1 + index of the most significant non-zero digit (at least 1, for "0").
    nonzero = sum_EL > 0
    sum_len = np.where(nonzero.any(axis=1), width + 1 - np.argmax(nonzero[:, ::-1], axis=1), 1)
    return sum_EL, sum_len


def _addition_examples(
    rng: np.random.Generator, n: int, min_len: int, max_len: int, reverse_answer: bool
) -> list[Example]:
    a_EL, a_len = _random_numbers(rng, n, min_len, max_len)
    b_EL, b_len = _random_numbers(rng, n, min_len, max_len)
    sum_EL, sum_len = _column_sum(a_EL, b_EL)

    examples = []
    for i in range(n):
        a = a_EL[i, : a_len[i]][::-1] + _FIRST_ID  # most significant digit first
        b = b_EL[i, : b_len[i]][::-1] + _FIRST_ID
        s = sum_EL[i, : sum_len[i]] + _FIRST_ID  # least significant digit first
        x = np.concatenate([a, [_PLUS_ID], b]).astype(np.int32)
        y = (s if reverse_answer else s[::-1]).astype(np.int32)
        examples.append((x, y))
    return examples


def generate_examples(
    task: Task,
    rng: np.random.Generator,
    num_examples: int,
    *,
    min_len: int,
    max_len: int,
    num_symbols: int = 10,
    reverse_answer: bool = False,
) -> list[Example]:
    """`num_examples` (inputs, targets) pairs with lengths drawn uniformly in [min_len, max_len].

    copy/reverse/sort: inputs are symbols (ids 3 .. 3 + num_symbols - 1); targets are the same,
    reversed, or sorted. addition: each operand has min_len..max_len digits; the target is the
    sum's digits, least significant first when `reverse_answer` (easier to learn: carries then
    flow left to right, in generation order).
    """
    if task == "addition":
        return _addition_examples(rng, num_examples, min_len, max_len, reverse_answer)
    if task in ("copy", "reverse", "sort"):
        return _symbol_examples(task, rng, num_examples, min_len, max_len, num_symbols)
    raise ValueError(f"unknown algorithmic task {task!r}; valid: {TASKS}")


def _t2t_addition_examples(
    rng: np.random.Generator, n: int, max_len: int, exact_len: bool
) -> list[Example]:
    """tensor2tensor's addition: operands of l1 ~ U[1, max_len // 2] and l2 ~ U[1, max_len -
    l1 - 1] digits (exact_len: l2 = max_len - l1 - 1, so every input has max_len tokens), both
    least significant digit first, separated by the symbol after the digits ("+"); the target is
    the sum, least significant digit first."""
    a_len = rng.integers(1, max_len // 2 + 1, size=n)
    b_len = max_len - a_len - 1 if exact_len else rng.integers(1, max_len - a_len)
    a_EL = _random_digits(rng, a_len, max_len)
    b_EL = _random_digits(rng, b_len, max_len)
    sum_EL, sum_len = _column_sum(a_EL, b_EL)
    examples = []
    for i in range(n):
        a, b = a_EL[i, : a_len[i]], b_EL[i, : b_len[i]]
        x = np.concatenate([a + _FIRST_ID, [_PLUS_ID], b + _FIRST_ID])
        examples.append(
            (x.astype(np.int32), (sum_EL[i, : sum_len[i]] + _FIRST_ID).astype(np.int32))
        )
    return examples


def t2t_examples(
    task: Task, rng: np.random.Generator, num_examples: int, *, max_len: int, exact_len: bool
) -> list[Example]:
    """The examples of tensor2tensor's algorithmic_{identity,reverse,addition}_decimal40
    (data_generators/algorithmic.py): decimal symbols, lengths uniform in [1, max_len] (its train
    split max_len=40, its dev split 400), or all of length max_len with `exact_len`. For
    addition max_len counts input tokens; see `_t2t_addition_examples`. Token ids are ours
    (3 + symbol; tensor2tensor's are 2 + symbol), and tensor2tensor also appends EOS to the
    inputs."""
    if task == "addition":
        return _t2t_addition_examples(rng, num_examples, max_len, exact_len)
    if task in ("copy", "reverse"):
        min_len = max_len if exact_len else 1
        return _symbol_examples(task, rng, num_examples, min_len, max_len, 10)
    raise ValueError(f"data.name={task!r} has no t2t variant; valid: {T2T_TASKS}")
