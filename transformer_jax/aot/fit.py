"""The largest global batch whose train step fits a chip's memory, within a budget of compiles.

Batches are multiples of the unit the run allows (chips x train.grad_accum_steps). Each probe is
one compile of the train step, seconds to minutes on a CPU, so the search aims its probes: a
step's memory grows about linearly with its batch (parameters and optimizer state, then
activations per row), so a straight line through the two latest probes' figures (a secant
step) predicts the largest batch under the chip's capacity, and the next probe goes there; its
neighbour then confirms it. Before two figures it doubles from the config's batch (or halves
until one fits); a probe that does not fit gives its figure from the compiler's out-of-memory
message where that names one. Guesses stay strictly between the largest batch known to fit and
the smallest known not to, and three probes in a row on one side (memory that bends) bisect
instead, so the search ends exact however the memory grows, given compiles enough.
"""

import dataclasses

from transformer_jax.aot.programs import (
    Program,
    Target,
    compile_train,
    needed_bytes,
    with_batch_size,
)

_MAX_BATCH = 2**20


@dataclasses.dataclass(frozen=True)
class Fit:
    batch_size: int  # largest batch found to fit; 0 when none does
    program: Program | None  # its train step
    too_big: int  # smallest batch found not to fit; 0 when none was found within the budget
    too_big_program: Program | None
    compiles: int

    @property
    def exact(self) -> bool:
        """True when no batch between the two was left untried."""
        return self.too_big > 0 and self.too_big - self.batch_size <= self.unit

    unit: int = 1


def fits(target: Target, program: Program) -> bool:
    return program.compiled and program.total_bytes <= target.topology.chip.hbm_bytes


def predicted(points: dict[int, float], capacity: float) -> int | None:
    """The largest multiple that a straight line through the two latest measured probes puts
    at or under `capacity` (a secant step); None without two points or a rising line."""
    if len(points) < 2:
        return None
    a, b = sorted(list(points)[-2:])
    slope = (points[b] - points[a]) / (b - a)
    if slope <= 0:
        return None
    return a + int((capacity - points[a]) // slope)


def next_probe(good: int, bad: int, guess: int | None, bisect: bool, highest: int) -> int:
    """The next multiple to try, between `good` (largest known to fit, 0: none) and `bad`
    (smallest known not to, 0: none known), at most `highest`."""
    high = bad - 1 if bad else highest
    if bisect and bad and good:
        return (good + bad) // 2
    if guess is None:  # no line yet: double up, or halve down
        return good * 2 if not bad else (good + bad) // 2 if good else max(bad // 2, 1)
    return min(max(guess, good + 1, 1), high)


def fit_batch(target: Target, max_compiles: int = 10, known: Program | None = None) -> Fit:
    """See the module docstring. `known`: the train step at the run's own batch, compiled
    already (it counts as the search's first probe, which then costs no compile)."""
    unit = target.topology.num_chips * target.prepared.train_cfg.grad_accum_steps
    capacity = target.topology.chip.hbm_bytes
    tried: dict[int, Program] = {}
    measured: dict[int, float] = {}  # multiple -> bytes per chip, where known
    sides: list[bool] = []  # whether each probe fit

    def probe(multiple: int) -> bool:
        if known is not None and multiple * unit == target.batch_size:
            program = known
        else:
            program = compile_train(with_batch_size(target, multiple * unit))
        tried[multiple] = program
        if (needed := needed_bytes(program)) is not None:
            measured[multiple] = needed
        sides.append(fits(target, program))
        return sides[-1]

    def affordable(multiple: int) -> bool:  # the known step costs no compile
        known_step = known is not None and multiple * unit == target.batch_size
        return len(tried) < max_compiles or known_step

    good, bad = 0, 0  # multiples of `unit` known to fit / not to fit (0: none known)
    multiple = max(target.batch_size // unit, 1)
    while affordable(multiple) and multiple not in tried and multiple * unit <= _MAX_BATCH:
        if probe(multiple):
            good = multiple
        else:
            bad = multiple
        if bad and bad - good <= 1:  # exact (or nothing fits: bad is one unit)
            break
        # Three probes in a row on one side: the line keeps missing (memory bends), so halve.
        bisect = len(sides) >= 3 and sides[-1] == sides[-2] == sides[-3]
        guess = predicted(measured, capacity)
        multiple = next_probe(good, bad, guess, bisect, _MAX_BATCH // unit)
    return Fit(
        batch_size=good * unit,
        program=tried.get(good),
        too_big=bad * unit,
        too_big_program=tried.get(bad),
        compiles=len(tried),
        unit=unit,
    )
