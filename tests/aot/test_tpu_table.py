"""benchmarks/tpu_table.py resumes: a table built in pieces, or killed half way, ends with every
row computed once, and each slice's line below the table says how its rows were made. No
compiles: a fake row function stands in for the compiler."""

import pytest

from benchmarks import tpu_table

SLICES = ["v5e:1x1", "v5e:2x4"]
NAMES = tpu_table.ROW_NAMES


def rows_on(topology):
    return len(tpu_table.configs_of(topology))


class FakeRows:
    """Rows that name the flags they were made with, counting calls; raises (a kill) when
    `stop_after` rows have been made."""

    def __init__(self, stop_after=None):
        self.calls, self.stop_after = [], stop_after

    def __call__(self, name, topology, fit_compiles):
        if self.stop_after is not None and len(self.calls) == self.stop_after:
            raise KeyboardInterrupt
        self.calls.append((name, topology))
        return f"| {name} | {topology} | jax | yes | fit_compiles={fit_compiles} | | | | |"


def rows_of(path):
    return tpu_table.read_table(path).rows


def test_a_killed_table_resumes_with_only_the_missing_rows(tmp_path):
    out = tmp_path / "tpu_aot.md"
    with pytest.raises(KeyboardInterrupt):
        tpu_table.build(out, NAMES, SLICES, 6, make_row=FakeRows(stop_after=5))
    assert len(rows_of(out)) == 5  # written after each row
    text = out.read_text()
    assert "Incomplete: 5 of 43 rows" in text and f"v5e:1x1: {', '.join(NAMES[5:])};" in text

    second = FakeRows()
    tpu_table.build(out, NAMES, SLICES, 6, make_row=second)
    first_five = [(name, "v5e:1x1") for name in NAMES[:5]]
    assert len(second.calls) == rows_on("v5e:1x1") + rows_on("v5e:2x4") - 5
    assert not set(first_five) & set(second.calls)
    assert set(rows_of(out)) == {(n, s) for s in SLICES for n in tpu_table.configs_of(s)}
    text = out.read_text()
    for topology in SLICES:  # each slice's line is the command that makes it
        made = f"({rows_on(topology)} rows, "
        assert f"- {topology}: `{tpu_table.command(topology, 6)}` {made}" in text
    assert "Incomplete: 20 of 43 rows" in text  # two of the five default slices made
    assert "Missing: v4:2x2x1: all; v6e:2x4: all; v6e:1x1: all." in text


def test_one_chip_slices_compile_the_jax_path_beside_splash():
    """On one chip "auto" is splash where it tiles: the [jax attention] rows are the same
    configs with model.attention.impl="jax", on the one-chip slices only."""
    for topology in ("v5e:1x1", "v6e:1x1"):
        assert set(tpu_table.JAX_ATTENTION) <= set(tpu_table.configs_of(topology))
    assert not set(tpu_table.JAX_ATTENTION) & set(tpu_table.configs_of("v5e:2x4"))
    for name, base in tpu_table.JAX_ATTENTION.items():
        config, own = tpu_table.load(name), tpu_table.load(base)
        assert (config.model.attention.impl, own.model.attention.impl) == ("jax", "auto")
        config.model.attention.impl = "auto"
        assert config.to_dict() == own.to_dict()


def test_slices_made_with_other_flags_are_kept_and_stated(tmp_path):
    """v5e:1x1 with a batch search and the 8-chip slices without: both parts stay, each with
    its own command; rerunning a slice with other flags recomputes that slice only."""
    out = tmp_path / "tpu_aot.md"
    tpu_table.build(out, NAMES, ["v5e:1x1"], 6, make_row=FakeRows())
    tpu_table.build(out, NAMES, tpu_table.TOPOLOGIES[1:], 0, make_row=FakeRows())
    text = out.read_text()
    assert f"`{tpu_table.command('v5e:1x1', 6)}`" in text
    assert f"`{tpu_table.command('v6e:2x4', 0)}`" in text
    assert "Incomplete" not in text
    assert rows_of(out)[("multi30k", "v5e:1x1")].endswith("fit_compiles=6 | | | | |")
    assert rows_of(out)[("multi30k", "v4:2x2x1")].endswith("fit_compiles=0 | | | | |")

    again = FakeRows()
    tpu_table.build(out, NAMES, ["v5e:2x4"], 2, make_row=again)
    assert {s for _, s in again.calls} == {"v5e:2x4"} and len(again.calls) == rows_on("v5e:2x4")
    assert rows_of(out)[("multi30k", "v5e:1x1")].endswith("fit_compiles=6 | | | | |")
    assert rows_of(out)[("multi30k", "v5e:2x4")].endswith("fit_compiles=2 | | | | |")


def test_fresh_recomputes_only_the_rows_asked_for(tmp_path):
    out = tmp_path / "tpu_aot.md"
    tpu_table.build(out, NAMES, SLICES, 0, make_row=FakeRows())
    unchanged = FakeRows()
    tpu_table.build(out, NAMES, SLICES, 0, make_row=unchanged)
    assert unchanged.calls == []
    fresh = FakeRows()
    tpu_table.build(out, ["char_lm"], SLICES, 0, fresh=True, make_row=fresh)
    assert fresh.calls == [("char_lm", s) for s in SLICES]
    assert len(rows_of(out)) == sum(rows_on(s) for s in SLICES)


def test_rows_without_a_stated_origin_are_recomputed(tmp_path):
    """A table written by hand (or by a version without the per-slice lines) is not trusted."""
    out = tmp_path / "tpu_aot.md"
    out.write_text(
        "| config | slice | fits? | HBM GiB / chip | batch: shipped / largest | step | rate |\n"
        "| --- | --- | --- | --- | --- | --- | --- |\n"
        "| algorithmic:copy | v5e:1x1 | yes | 0.05 / 16.00 | 64 / - | 1.0 ms | 1 tokens/s |\n"
    )
    assert rows_of(out) == {}
    made = FakeRows()
    tpu_table.build(out, ["algorithmic:copy"], ["v5e:1x1"], 0, make_row=made)
    assert made.calls == [("algorithmic:copy", "v5e:1x1")]


def test_colabs_v6e_slice_has_its_row_only_and_older_layouts_are_recomputed(tmp_path):
    """v6e:1x1 compiles the configs listed for it alone; a row of the layout before the
    attention and traffic columns is recomputed even under its slice's provenance line."""
    out = tmp_path / "tpu_aot.md"
    made = FakeRows()
    tpu_table.build(out, NAMES, ["v6e:1x1"], 0, make_row=made)
    assert made.calls == [(name, "v6e:1x1") for name in tpu_table.SLICE_CONFIGS["v6e:1x1"]]
    old = "| char_lm | v5e:1x1 | yes | 0.08 / 16.00 | 32 / - | 1.8 ms (memory) | 2 tokens/s |"
    out.write_text(
        out.read_text() + f"{old}\n- v5e:1x1: `{tpu_table.command('v5e:1x1', 0)}` "
        "(1 row, 1.0 minutes of compiling)\n"
    )
    assert ("char_lm", "v5e:1x1") not in rows_of(out)
    assert ("multi30k", "v6e:1x1") in rows_of(out)
    assert "v5e:1x1" not in tpu_table.read_table(out).parts  # its time starts afresh too
