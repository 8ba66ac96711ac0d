"""The name benchmarks/device_check.py imports a dataset's facts by; they live in the dataset's
registry entry (data/registry.py `describe_dataset`)."""

from transformer_jax.data import describe_dataset as planned_info

__all__ = ["planned_info"]
