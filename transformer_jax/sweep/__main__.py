"""`python -m transformer_jax.sweep`: the sweep command line, transformer_jax/sweep_cli.py.

That command writes the report, which reads this package's sweep definitions, so it sits above
both; `python -m` finds it under this package's name, and this file only hands the process over
(as `python -m transformer_jax.sweep_cli` would run it), importing nothing above the package.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("transformer_jax.sweep_cli", run_name="__main__", alter_sys=True)
