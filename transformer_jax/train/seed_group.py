"""Seed groups: the seeds of one config trained together, as one program.

`train_seed_group(config, workdir, seeds)` trains `config` once per seed, seed s in
WORKDIR/seed_<s>/ with the files a solo run (`train_and_evaluate` with config.seed = s) writes
there, so `transformer_jax.generate`, the analysis commands, the report and a resume read each
seed as an ordinary run. The seeds' train states (parameters, optimizer state, BatchNorm
statistics, step and dropout key) are stacked on a leading seed axis and updated by one
`jax.jit(jax.vmap(train_step))`: an accelerator runs one program n times the size, and the step
compiles once for all seeds (PureJaxRL trains RL seeds the same way). What differs between the
seeds is what differs between their solo runs: the initial parameters and dropout key
(`PRNGKey(seed)`) and the data order (`train_iterator(seed=seed)`).

Everything on the host is per seed and goes through the solo run's own pieces: logging windows,
train lines, evaluation (each seed's state through the solo run's compiled eval step, so its
eval metrics are the solo run's whenever its parameters are), BLEU, checkpoints and summaries.

Equality with the solo runs: to rounding, not bit for bit. Under vmap each matmul of the step is
a batched one, which XLA:CPU sums in another order, so a seed's loss can differ from its solo
run's in the last bit from the first step; with SGD the metrics stay within ~2e-7 relative and
the parameters within ~2e-7 absolute over 20 steps of the tests' models, while Adam, whose first
updates are about lr * sign(gradient), turns a near-zero gradient entry whose sign flips into a
2 * lr parameter difference (tests/train/test_seed_group.py states the measurements). On several
devices, a group with as many seeds as devices (or a multiple) trains each seed on devices of
its own, the seed axis sharded over them with no communication between seeds: different runs
on different devices at once, in one program (a TPU host's chips, a multi-GPU machine); any
other group replicates its state and splits each seed's batch rows over the devices as in a
solo run (`compile_group_train`).

A seed whose loss turns non-finite gets the "diverged" summary its solo run would write and is no
longer logged, evaluated or checkpointed; the other seeds train on (its lane of the vmapped step
keeps computing, independently of theirs). A signal checkpoints every seed and returns.

Resume: each seed restores its own latest checkpoint. The seeds of a group checkpoint at the same
steps, so a group interrupted and rerun resumes all of them at one step. Seeds at different steps
(e.g. one of them was trained on alone) cannot share a step: the group refuses before touching
anything, naming each seed's step; train them separately.
"""

import contextlib
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax import run_dir
from transformer_jax.data import tokenizers
from transformer_jax.train import step as steps
from transformer_jax.train import trainer
from transformer_jax.train.bleu_eval import BleuEvaluator
from transformer_jax.train.checkpoint import Checkpointer, CheckpointSaveError
from transformer_jax.train.logger import MetricsLogger
from transformer_jax.train.numerics import NonFiniteError, check_finite
from transformer_jax.train.parallel import DATA, FSDP, make_parallel
from transformer_jax.train.signals import StopOnSignal
from transformer_jax.train.timing import Phases, breakdown_line


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds of a group as a list; a ValueError naming them unless distinct ints >= 0."""
    seeds = list(seeds)
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds):
        raise ValueError(f"--seeds={seeds!r} is invalid; expected one or more ints >= 0")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds={seeds!r} repeats a seed; each seed trains once")
    return seeds


def check_group_parallelism(train_cfg) -> None:
    """A seed group shards each batch over the devices and replicates the stacked state; the
    layouts that place a state otherwise are refused before anything compiles, and so is early
    stopping, which would end each seed at its own step."""
    if train_cfg.early_stop_metric:
        raise ValueError(
            f"train.early_stop_metric={train_cfg.early_stop_metric!r} cannot train a seed group "
            "(each seed would stop at its own step); train the seeds separately"
        )
    for field, value, valid in (
        ("parallelism", train_cfg.parallelism, "jit"),
        ("fsdp", train_cfg.fsdp, 1),
        ("distributed", train_cfg.distributed, False),
    ):
        if value != valid:
            raise ValueError(
                f"train.{field}={value!r} cannot train a seed group (valid: {valid!r}); "
                "train the seeds separately"
            )


def stack(trees: Sequence[Any]) -> Any:
    """Pytrees of equal structure -> one pytree with a leading axis over them."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def unstack(tree: Any, index: int) -> Any:
    """Entry `index` of a pytree stacked by `stack`."""
    return jax.tree.map(lambda x: x[index], tree)


def shards_seeds(num_seeds: int, mesh) -> bool:
    """Whether a group of `num_seeds` trains each seed on devices of its own: several devices,
    and seeds that divide evenly over them."""
    return mesh.size > 1 and num_seeds % mesh.size == 0


def group_state_sharding(num_seeds: int, mesh) -> NamedSharding:
    """Where a group's stacked state lives: split along the seed axis (`shards_seeds`), or
    replicated on every device."""
    if shards_seeds(num_seeds, mesh):
        return NamedSharding(mesh, PartitionSpec((DATA, FSDP)))
    return NamedSharding(mesh, PartitionSpec())


def compile_group_train(train_step, mesh, num_seeds: int):
    """`jax.vmap(train_step)` over a leading seed axis of the state and the batch, jitted for
    `mesh` with the state donated. With `shards_seeds`, the state, batches and metrics are split
    along the seed axis: each device runs whole seeds, with no collective between them.
    Otherwise the stacked state is replicated and each seed's batch rows are split over the
    devices as in a solo run (XLA sums each seed's gradients over them)."""
    seed_sharding = group_state_sharding(num_seeds, mesh)  # the metrics' too
    batch_sharding = seed_sharding
    if not shards_seeds(num_seeds, mesh):
        batch_sharding = NamedSharding(mesh, PartitionSpec(None, (DATA, FSDP)))
    return jax.jit(
        jax.vmap(train_step),
        in_shardings=(seed_sharding, batch_sharding),
        out_shardings=(seed_sharding, seed_sharding),
        donate_argnums=0,
    )


@dataclasses.dataclass
class _Seed:
    """The host side of one seed's run: its directory, data, logging and checkpoints."""

    seed: int
    workdir: Path
    resolved: dict  # its config.json
    train_iter: Any
    changes: dict  # what a resume changes (trainer.resume_changes)
    has_tokenizer: bool
    logger: MetricsLogger | None = None
    checkpointer: Checkpointer | None = None
    lock: Any = None
    bleu: BleuEvaluator | None = None
    window: list = dataclasses.field(default_factory=list)  # restored steps of a partial window
    window_start: float = 0.0
    rates: list = dataclasses.field(default_factory=list)
    final_metrics: dict = dataclasses.field(default_factory=dict)
    ended: run_dir.RunSummary | None = None  # its "diverged" or "failed" summary

    def outcome(self, status: run_dir.Status, at: int, num_params: int, phases: Phases, **fields):
        return run_dir.RunSummary(
            status=status,
            step=at,
            metrics=self.final_metrics,
            num_params=num_params,
            wall_time_s=self.logger.elapsed(),
            timing=phases.breakdown(),  # The group's, shared by its seeds.
            **fields,
        )


def _latest_step(workdir: Path) -> int:
    """The step of the newest checkpoint in `workdir`, 0 without one; reads, never writes."""
    if not (workdir / run_dir.CHECKPOINT_DIR).is_dir():
        return 0
    with Checkpointer(workdir, every=1, keep=1_000_000, read_only=True) as checkpointer:
        return checkpointer.latest_step() or 0


def _check_same_step(runs: Sequence[_Seed]) -> None:
    at = {run.seed: _latest_step(run.workdir) for run in runs}
    if len(set(at.values())) > 1:
        listed = ", ".join(f"seed {seed}: step {step}" for seed, step in at.items())
        raise ValueError(
            f"the seeds of a group resume together from one step, but their checkpoints are at "
            f"different steps ({listed}); train these seeds separately (transformer_jax.main "
            "without --seeds; a sweep with --seed_groups=false)"
        )


def train_seed_group(
    config: ml_collections.ConfigDict, workdir: str, seeds: Sequence[int]
) -> list[run_dir.RunSummary]:
    """Trains `config` for each of `seeds` in WORKDIR/seed_<seed>/, as one vmapped program.

    Returns each seed's summary, in the order of `seeds`: the one written to its summary.json,
    or a "stopped" one (not written) when a signal stopped the group. Raises
    CheckpointSaveError (after writing the "failed" summary of the seed that could not save).
    """
    seeds = check_seeds(seeds)
    workdir = Path(workdir).expanduser()
    phases = Phases()  # The group's wall time; see train/timing.py.
    prepared = trainer.prepare(config, phases)
    train_cfg, model, optimizer = prepared.train_cfg, prepared.model, prepared.optimizer
    dataset, info = prepared.dataset, prepared.dataset.info
    check_group_parallelism(train_cfg)

    runs = []
    for seed in seeds:
        seed_dir = Path(run_dir.seed_dir(workdir, seed))
        resolved = {**prepared.resolved, "seed": seed}
        has_tokenizer = tokenizers.check_stored_tokenizer(seed_dir, info.tokenizer)
        changes = trainer.resume_changes(seed_dir, resolved)
        train_iter = dataset.train_iterator(seed=seed, batch_size=config.data.batch_size)
        runs.append(_Seed(seed, seed_dir, resolved, train_iter, changes, has_tokenizer))
    _check_same_step(runs)

    sample = next(iter(next(iter(prepared.eval_sets.values()))))
    parallel = make_parallel(train_cfg)
    with phases("init"):
        init = steps.make_init(model, optimizer, sample)
        initial = [parallel.place_state(init(jax.random.PRNGKey(run.seed))) for run in runs]
    num_params = steps.count_params(initial[0].params)
    # A seed trained on devices of its own sees its whole batch on one device, as a solo run on
    # one device does: the same dropout bits (train.threefry="auto" picks by device count).
    step_devices = 1 if shards_seeds(len(runs), parallel.mesh) else parallel.num_devices
    train_fn = compile_group_train(
        steps.make_train_step(model, optimizer, train_cfg, step_devices),
        parallel.mesh,
        len(runs),
    )
    group_sharding = group_state_sharding(len(runs), parallel.mesh)
    eval_fns = trainer.make_eval_fns(prepared, parallel, phases)
    for run in runs:
        if train_cfg.bleu:
            run.bleu = BleuEvaluator(dataset, config.data.batch_size, train_cfg, model, run.workdir)

    def evaluate_seed(run: _Seed, state, final: bool) -> dict[str, dict[str, float]]:
        with phases("eval"):
            results = trainer.evaluate(eval_fns, state, prepared.eval_sets)
            if run.bleu is not None:
                with phases("decode"):
                    run.bleu.add_to(results, state, final=final)
        return results

    # Everything is validated: only now do the run directories change. What is opened is closed
    # last to first when the group returns or raises: each seed's lock outlives its
    # checkpointer's final wait.
    closing = contextlib.ExitStack()
    step = 0
    try:
        restored_states = []
        for run, state in zip(runs, initial, strict=True):
            run.workdir.mkdir(parents=True, exist_ok=True)
            run.lock = closing.enter_context(contextlib.closing(run_dir.lock_run(run.workdir)))
            run.checkpointer = closing.enter_context(
                Checkpointer(
                    run.workdir,
                    every=train_cfg.checkpoint_every,
                    keep=train_cfg.keep_checkpoints,
                    fallback=train_cfg.restore_fallback,
                )
            )
            run.logger = closing.enter_context(
                MetricsLogger(run.workdir, total_steps=train_cfg.steps, config=run.resolved)
            )
            with phases("checkpoint"):
                restored = run.checkpointer.restore(state)
            loop = {}
            if restored is not None:
                state, data_state = restored
                run.train_iter.set_state(data_state)
                run.logger.truncate_after(int(state.step))
                loop = run.checkpointer.restore_loop_state(int(state.step))
                if run.changes:
                    run_dir.record_resume(run.workdir, int(state.step), run.changes)
                print(f"Resumed {run.workdir} at step {int(state.step)}.", flush=True)
            else:
                run.logger.truncate_after(0)
                run_dir.write_config(run.workdir, run.resolved)
            if info.tokenizer is not None and not run.has_tokenizer:
                tokenizers.write_tokenizer(info.tokenizer, run.workdir)
            run.window = trainer.window_from_json(loop.get("window", {}))
            run.window_start = time.perf_counter() - loop.get("window_elapsed_s", 0.0)
            run.rates = list(loop.get("rates", []))
            restored_states.append(state)
        print(f"{info.name}: {len(runs)} seeds x {num_params:,} parameters.", flush=True)
        states = jax.device_put(stack(restored_states), group_sharding)
        step = int(restored_states[0].step)
        del initial, restored_states

        group_window = []  # per-step metrics since the last train line, stacked over the seeds
        compiling = True  # This process's first window includes compilation: not a rate.

        def seed_state(i: int):
            """Seed i's state, placed as a solo run's (a sharded group holds it on its own
            devices; the eval step and checkpoints expect the run's layout)."""
            return parallel.place_state(unstack(states, i))

        def active():
            return [(i, run) for i, run in enumerate(runs) if run.ended is None]

        def partial_window(i: int, run: _Seed) -> list[dict]:
            host = jax.device_get(group_window)
            return run.window + [{name: value[i] for name, value in m.items()} for m in host]

        def loop_state(i: int, run: _Seed) -> dict:
            return {
                "window": trainer.window_to_json(partial_window(i, run)),
                "window_elapsed_s": time.perf_counter() - run.window_start,
                "rates": run.rates,
            }

        def save(i: int, run: _Seed, force: bool) -> None:
            state = seed_state(i)
            try:
                with phases("checkpoint"):
                    run.checkpointer.save(
                        step,
                        state,
                        run.train_iter.get_state(),
                        loop_state=loop_state(i, run),
                        force=force,
                    )
                    if force:
                        run.checkpointer.wait_until_finished()
            except CheckpointSaveError as error:
                run.ended = run.outcome("failed", step, num_params, phases, error=str(error))
                with contextlib.suppress(OSError):  # The full disk may not take the summary either.
                    run.logger.write_summary(run.ended)
                raise

        first_step = step
        with StopOnSignal() as stop, phases("train"):
            while step < train_cfg.steps and active():
                batches = [next(run.train_iter) for run in runs]  # Diverged seeds' lanes too.
                batch = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
                # The first call traces and compiles; its execution is asynchronous.
                with phases("compile") if step == first_step else contextlib.nullcontext():
                    states, metrics = train_fn(states, batch)
                step += 1
                group_window.append(metrics)
                logged = step % train_cfg.log_every == 0 or step == train_cfg.steps
                if logged:
                    jax.block_until_ready(group_window)  # Then the clock: see trainer.py.
                    now = time.perf_counter()
                    for i, run in active():
                        opt_state = unstack(states.opt_state, i)
                        averaged = trainer.train_line(
                            partial_window(i, run), now - run.window_start, opt_state
                        )
                        run.logger.write(step, "train", averaged)  # A diverged window too.
                        try:
                            check_finite(step, averaged)
                        except NonFiniteError as error:
                            run.ended = run.outcome(
                                "diverged", step, num_params, phases, error=str(error)
                            )
                            run.logger.write_summary(run.ended)
                            continue
                        if not compiling:
                            run.rates.append(averaged["tokens_per_sec"])
                        run.window, run.window_start = [], time.perf_counter()
                    group_window, compiling = [], False
                if step % train_cfg.eval_every == 0 or step == train_cfg.steps:
                    for i, run in active():
                        final = step == train_cfg.steps
                        run.final_metrics = evaluate_seed(run, seed_state(i), final)
                        for split, values in run.final_metrics.items():
                            run.logger.write(step, split, values)
                        run.window_start = time.perf_counter()
                stopping = stop.stop_requested()
                if logged or stopping:  # The checkpointers save when due; a signal forces it.
                    for i, run in active():
                        save(i, run, force=stopping)
                if stopping:
                    print(f"Stopped by signal at step {step}; checkpoints saved.", flush=True)
                    return [
                        run.ended or run.outcome("stopped", step, num_params, phases)
                        for run in runs
                    ]
        for i, run in active():
            save(i, run, force=True)  # On disk before the summary says "finished".
            if not run.final_metrics:  # Resumed at the last step: evaluate the restored state.
                run.final_metrics = evaluate_seed(run, seed_state(i), final=True)
            run.ended = run.outcome(
                "finished",
                step,
                num_params,
                phases,
                tokens_per_sec=float(np.median(run.rates)) if run.rates else None,
                bleu=run.bleu.summary() if run.bleu is not None else None,
            )
            run.logger.write_summary(run.ended)
        print(breakdown_line(phases.breakdown()), flush=True)
        return [run.ended for run in runs]
    except OSError as error:  # A save that failed, or another write on the same full disk.
        causes = [run.checkpointer.failed_save() for run in runs if run.checkpointer]
        cause = next((c for c in causes if c is not None), error)
        for run in runs:  # Every seed the group was training ends with it.
            if run.ended is None and run.logger is not None:
                run.ended = run.outcome("failed", step, num_params, phases, error=str(cause))
                with contextlib.suppress(OSError):  # The full disk may not take it either.
                    run.logger.write_summary(run.ended)
        if cause is error:
            raise
        raise cause from error
    finally:
        closing.close()
