"""transformer_jax/colab.py: the pins that keep a runtime's jax, pip's conflict in one line, and
the probe's check for an accelerator that jax does not see."""

from transformer_jax import colab


def test_the_pins_are_the_runtimes_jax_and_its_plugins_only():
    freeze = [
        "absl-py==2.1.0",
        "jax==0.6.2",
        "jaxlib==0.6.2",
        "libtpu==0.0.17",
        "jax_cuda12_plugin==0.6.2",
        "jax-cuda12-pjrt==0.6.2",
        "jaxtyping==0.2.36",  # shares a prefix, is no part of jax
        "flax==0.10.0",  # to be picked by pip for that jax, not kept
        "-e git+https://example.org/jax.git#egg=jax",  # no version to pin
    ]
    assert colab.keep_installed(freeze) == [
        "jax-cuda12-pjrt==0.6.2",
        "jax-cuda12-plugin==0.6.2",
        "jax==0.6.2",
        "jaxlib==0.6.2",
        "libtpu==0.0.17",
    ]
    assert colab.keep_installed(["libtpu-nightly==0.1.dev20240617"]) == [
        "libtpu-nightly==0.1.dev20240617"
    ]
    assert colab.keep_installed(["numpy==2.1.0"]) == []


def test_the_conflict_is_the_requirements_pip_lists():
    output = """ERROR: Cannot install demo because these package versions have conflicting
dependencies.

The conflict is caused by:
    flax 0.12.0 depends on jax>=0.7.1
    The user requested (constraint) jax==0.6.2

To fix this you could try to:
1. loosen the range of package versions you've specified
"""
    assert colab.conflict(output) == (
        "flax 0.12.0 depends on jax>=0.7.1; The user requested (constraint) jax==0.6.2"
    )
    assert colab.conflict("ERROR: No matching distribution found for flax\n") == (
        "ERROR: No matching distribution found for flax"
    )


def test_an_accelerator_jax_does_not_see_is_named():
    nothing = {"environ": {}, "exists": lambda path: False, "glob": lambda pattern: []}
    assert colab.accelerator_unseen("cpu", **nothing) is None  # a CPU runtime: CPU is right
    v5e = {**nothing, "glob": lambda p: ["/dev/vfio/0"] if p.startswith("/dev/vfio") else []}
    line = colab.accelerator_unseen("cpu", **v5e)
    assert "has a TPU (/dev/vfio/0)" in line and "\n" not in line
    assert colab.accelerator_unseen("tpu", **v5e) is None
    named = colab.accelerator_unseen("cpu", **{**nothing, "environ": {"TPU_NAME": "local"}})
    assert "has a TPU (TPU_NAME)" in named
    gpu = colab.accelerator_unseen("cpu", **{**nothing, "exists": lambda p: p == "/dev/nvidia0"})
    assert "has a GPU (/dev/nvidia0)" in gpu
    assert colab.accelerator_unseen("gpu", **{**nothing, "exists": lambda p: True}) is None


def test_the_stop_renders_as_its_one_line():
    assert colab.Stop("one line")._render_traceback_() == ["one line"]
