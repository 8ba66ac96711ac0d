"""The fields the members of one run group may differ in (train/seed_group.py).

Besides the seed, the numbers the optimizer and its schedule read at every update
(train/optimizer.py): never a shape or a choice of program, so the members' differences become
per-member values of one compiled step. Kept free of JAX so the sweep runner, which groups a
tuned cell's runs by them (sweep/runner.py `launches`), imports it without starting JAX.
"""

GROUP_SCALARS = (
    "learning_rate",
    "warmup_steps",
    "b1",
    "b2",
    "eps",
    "weight_decay",
    "grad_clip_norm",
)
# The same as dotted config keys, as sweeps and overrides name them.
GROUP_KEYS = tuple(f"train.{name}" for name in GROUP_SCALARS)
