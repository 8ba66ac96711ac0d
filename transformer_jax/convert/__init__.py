"""Hugging Face checkpoints in and out of run directories: `python -m transformer_jax.convert`
(docs/pretrained.md). One mapping module per architecture: gpt2, vit, llama."""
