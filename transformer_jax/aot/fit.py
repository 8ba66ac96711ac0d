"""The largest global batch whose train step fits a chip's memory, by bisection over compiles.

Batches are multiples of the unit the run allows (chips x train.grad_accum_steps). From the
config's batch the search doubles while the step fits (or halves until it does), then bisects
between the largest multiple known to fit and the smallest known not to, within a budget of
compiles: each probe is one compile of the train step, seconds to minutes on a CPU.
"""

import dataclasses

from transformer_jax.aot.programs import Plan, Program, compile_train, with_batch_size

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


def fits(plan: Plan, program: Program) -> bool:
    return program.compiled and program.total_bytes <= plan.topology.chip.hbm_bytes


def fit_batch(plan: Plan, max_compiles: int = 10) -> Fit:
    """See the module docstring."""
    unit = plan.topology.num_chips * plan.train_cfg.grad_accum_steps
    tried: dict[int, Program] = {}

    def probe(multiple: int) -> bool:
        program = compile_train(with_batch_size(plan, multiple * unit))
        tried[multiple] = program
        return fits(plan, program)

    good, bad = 0, 0  # multiples of `unit` known to fit / not to fit (0: none known)
    start = max(plan.batch_size // unit, 1)
    if probe(start):
        good, m = start, start * 2
        while len(tried) < max_compiles and m * unit <= _MAX_BATCH:
            if not probe(m):
                bad = m
                break
            good, m = m, m * 2
    else:
        bad, m = start, start // 2
        while len(tried) < max_compiles and m >= 1:
            if probe(m):
                good = m
                break
            bad, m = m, m // 2
    while bad and bad - good > 1 and len(tried) < max_compiles:
        m = (good + bad) // 2
        if probe(m):
            good = m
        else:
            bad = m
    return Fit(
        batch_size=good * unit,
        program=tried.get(good),
        too_big=bad * unit,
        too_big_program=tried.get(bad),
        compiles=len(tried),
        unit=unit,
    )
