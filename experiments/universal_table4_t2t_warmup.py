"""Does the step budget decide Table 4's UT row? tensor2tensor's recipe with its warmup fitted

experiments/universal_table4_t2t.py trains copy under tensor2tensor's recipe for 3,000 steps,
inside its 8,000-step warmup, and there the UTs do not learn the training lengths (test token
accuracy 0.53 against the Transformer's 1.00; docs/findings.md). This sweep changes one thing for
every variant: the warmup ends at step 1,000 instead of 8,000, with the learning rate's constant
scaled so that the peak is tensor2tensor's, 2.0 x 128^-0.5 x 8,000^-0.5 = 2.0e-3 (here
0.707 x 128^-0.5 x 1,000^-0.5), after which it decays as rsqrt(step) as there, to 1.1e-3 at step
3,000. A departure from models/transformer.py:1851 (learning_rate_warmup_steps = 8000), beside
every departure that universal_table4_t2t.py lists; nothing else differs. If the UTs now learn
1-40, the budget decided the row; whether they then generalise to 400 is the method's answer
at this size.

  python -m transformer_jax.sweep --sweep=experiments/universal_table4_t2t_warmup.py \
      --workdir=results/universal_table4_t2t_warmup/copy --parallel=2 --seed_groups=false
  for run in results/universal_table4_t2t_warmup/copy/ut*/seed_*; do
      python -m transformer_jax.analysis.reread_positions --workdir=$run \
          --eval_positions=step_offset --splits=test,test_long
  done
"""

import dataclasses
import runpy
from pathlib import Path

WARMUP_STEPS = 1_000


def fitted_warmup(recipe: dict) -> dict:
    """The overrides that end `recipe`'s warmup at WARMUP_STEPS with its peak rate unchanged."""
    return {
        "train.warmup_steps": WARMUP_STEPS,
        # The rsqrt schedule peaks at learning_rate x d_model^-0.5 x warmup^-0.5: the same peak.
        "train.learning_rate": recipe["train.learning_rate"]
        * (WARMUP_STEPS / recipe["train.warmup_steps"]) ** 0.5,
    }


def get_sweep():
    t2t = runpy.run_path(str(Path(__file__).with_name("universal_table4_t2t.py")))
    # tensor2tensor's rate constant and warmup (models/transformer.py:1851)
    fitted = fitted_warmup(t2t["RECIPE"])
    base = t2t["make_sweep"]("copy")
    variants = {name: {**overrides, **fitted} for name, overrides in base.variants.items()}
    return dataclasses.replace(base, variants=variants, description="")
