"""One-command analyses: the lectures' "going deeper" exercises and figures of trained runs.

Each module runs as `python -m transformer_jax.analysis.<name> ... --out=FILE.png`.
"""
