"""How a run is named and grouped on W&B, from its run directory and the sweep's hparams.json."""

from transformer_jax.tracking.run import run_names


def test_sweep_runs_are_grouped_by_sweep_and_variant(tmp_path):
    sweep_run = {"sweep": "scale", "hparams": {"variant": "none", "seed": 1}}
    assert run_names(tmp_path / "scale" / "none" / "seed_1", sweep_run) == (
        "none/seed_1",
        "scale/none",
    )


def test_nuisance_settings_are_groups_of_their_own(tmp_path):
    hparams = {"variant": "none", "setting": "learning_rate-0.002", "seed": 0}
    run = tmp_path / "scale" / "none" / "learning_rate-0.002" / "seed_0"
    assert run_names(run, {"sweep": "scale", "hparams": hparams}) == (
        "none/learning_rate-0.002/seed_0",
        "scale/none/learning_rate-0.002",
    )


def test_a_seed_group_outside_a_sweep_is_grouped_by_its_directory(tmp_path):
    assert run_names(tmp_path / "copy" / "seed_2", {}) == ("copy/seed_2", "copy")


def test_any_other_run_is_its_directory(tmp_path):
    assert run_names(tmp_path / "copy_run", {}) == ("copy_run", None)
    assert run_names(tmp_path / "seed_x", {}) == ("seed_x", None)
