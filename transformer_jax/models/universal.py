"""The Universal Transformer: one block applied recurrently, optionally with Adaptive
Computation Time (Dehghani et al. 2019; Graves 2016).

A stack of N distinct layers becomes ONE `Block` applied for T steps with shared weights. Before
every step t = 1..T the coordinate signal is added: the stack's absolute position signal
(whatever `positional` is; nothing for rotary, alibi and none, which act inside attention; with
train/eval_positions="step_offset" shifted by a fresh random offset at every step, as
tensor2tensor does) plus the signal of the step number t (row t of the sinusoidal table, or of a
learned one: `model.universal.step_signal`, transformer_jax.layers.step_signals).

  fixed steps (act=False):  h_t = Block(h_{t-1} + P + S_t),   output h_T.
  ACT (act=True), per position, Graves 2016 with the tensor2tensor threshold test:
    p_t = sigmoid(W h_t + b)                                   halting unit
          (or of the block's input h_{t-1} + P + S_t, tensor2tensor's: halting_input)
    a position halts at the first step N where sum_{t<=N} p_t > 1 - eps, or at step T;
    R = 1 - sum_{t<N} p_t                                      remainder
    weights w_t = p_t for t < N, R for t = N, 0 after          (sum to 1 per position)
    output = sum_t w_t h_t;   ponder cost rho = N + R, tau * mean(rho over real positions).
  Only R carries gradient into rho (N counts steps). After halting, a position's state is
  copied unchanged (`act_halted="freeze"`, the paper) or keeps being transformed
  (`"transform"`, tensor2tensor); its output is frozen either way.

The steps are one `nn.scan` with the parameters broadcast (shared) over steps, dropout keys split
per step and the "cache" collection stacked per step: the block is shared, but the states it sees
(so its keys and values) differ at every step, so a decoder keeps T caches. Halting depends only
on a position's own state, so causal decoders stay causal.

Collections: "losses"/ponder_cost (tau * mean rho, added to the training loss by
`train.step.train_step`), "diagnostics"/ponder_mean, ponder_max (steps N over real positions),
"intermediates"/ponder_steps, ponder_remainders (B, T), step_states and block_inputs (the
block's input at each step: the state plus the coordinates), both (T_steps, B, T, D).
"""

from typing import NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.layers.positional import AddPositional, step_offsets
from transformer_jax.layers.step_signals import STEP_SIGNALS
from transformer_jax.models.blocks import Block, BlockContext
from transformer_jax.models.stack import TransformerStack, default_positions


class ActState(NamedTuple):
    """The recurrence's carry. Per position (B, T): halting is the summed halting probability
    (1.0 once halted), remainder R, steps N; output the weighted sum of states so far."""

    state_BTD: jnp.ndarray
    output_BTD: jnp.ndarray  # float32
    halting_BT: jnp.ndarray
    remainder_BT: jnp.ndarray
    steps_BT: jnp.ndarray


def act_update(carry: ActState, new_BTD, p_BT, *, is_last, threshold: float, freeze: bool):
    """One ACT step for every position: who halts, the weights, the accumulated output.

    `new_BTD` is the block's output h_t and `p_BT` its halting probability; `is_last` (a
    boolean scalar) forces every running position to halt. Pure, so tests can call it.
    """
    running_BT = carry.halting_BT < 1.0
    halts_BT = running_BT & ((carry.halting_BT + p_BT > threshold) | is_last)
    continues_BT = running_BT & ~halts_BT
    remainder_BT = jnp.where(halts_BT, 1.0 - carry.halting_BT, carry.remainder_BT)
    weight_BT = jnp.where(continues_BT, p_BT, jnp.where(halts_BT, remainder_BT, 0.0))
    halting_BT = jnp.where(
        continues_BT, carry.halting_BT + p_BT, jnp.where(halts_BT, 1.0, carry.halting_BT)
    )
    output_BTD = carry.output_BTD + weight_BT[..., None] * new_BTD.astype(jnp.float32)
    state_BTD = jnp.where(running_BT[..., None], new_BTD, carry.state_BTD) if freeze else new_BTD
    return ActState(
        state_BTD=state_BTD,
        output_BTD=output_BTD,
        halting_BT=halting_BT,
        remainder_BT=remainder_BT,
        steps_BT=carry.steps_BT + running_BT.astype(jnp.float32),
    )


class UniversalStep(nn.Module):
    """One recurrent step: coordinates, the shared block, and (ACT) the halting unit."""

    config: ModelConfig
    num_steps: int
    cross_attention: bool = False
    use_cache: bool = False
    train: bool = False

    @nn.compact
    def __call__(self, carry: ActState, step_inputs, position_BTD, context: BlockContext):
        cfg = self.config
        step, step_signal_D = step_inputs  # step in 1..num_steps; its step signal (D,)
        x_BTD = carry.state_BTD + (position_BTD + step_signal_D[None, None]).astype(
            carry.state_BTD.dtype
        )
        self.sow("intermediates", "block_inputs", x_BTD)  # the state plus the coordinates
        new_BTD = Block(
            cfg, cross_attention=self.cross_attention, use_cache=self.use_cache, name="block"
        )(x_BTD, context, train=self.train)
        universal = cfg.universal
        if not universal.act:
            self.sow("intermediates", "step_states", new_BTD)
            return carry._replace(state_BTD=new_BTD), None
        halting = nn.Dense(
            1,
            dtype=jnp.float32,
            param_dtype=jnp.float32,
            bias_init=nn.initializers.constant(universal.act_halting_bias_init),
            name="halting",
        )
        # step_input: tensor2tensor's p = dense(step_preprocess(state)), the state after this
        # step's coordinates and before the block (universal_transformer_util.py:1093-1108).
        halting_in_BTD = x_BTD if universal.halting_input == "step_input" else new_BTD
        p_BT = nn.sigmoid(halting(halting_in_BTD.astype(jnp.float32)))[..., 0]
        carry = act_update(
            carry,
            new_BTD,
            p_BT,
            is_last=step == self.num_steps,
            threshold=1.0 - universal.act_threshold_eps,
            freeze=universal.act_halted == "freeze",
        )
        self.sow("intermediates", "step_states", carry.state_BTD)  # what the next step reads
        return carry, None


class UniversalStack(TransformerStack):
    """A drop-in for `TransformerStack` (same inputs, masks, cache and parameters outside the
    block): one block for `config.universal.num_steps(num_layers)` steps instead of
    `num_layers` layers.

    (B, T, D) embeddings -> (B, T, D) states. Pre-norm stacks end with a final norm, as there.
    """

    def _body(
        self, x_BTD, q_pos_BT, context, *, valid_BT, blocked: bool, train: bool, positions_key
    ):
        """Positions, dropout and the recurrence: (B, T, D) embeddings -> (B, T, D) states."""
        del blocked  # The shared block attends over the whole T x T square (no causal blocks).
        cfg = self.config
        num_steps = cfg.universal.num_steps(self.num_layers)
        # The position part of the coordinates, added at every step rather than once: one
        # (B, T, D) signal for every step, or with step_offset a (U, B, T, D) stack, a fresh
        # offset per step (the masks, built from step 0's positions, hold for every shift).
        add_positional = AddPositional(cfg.positional, name="positional")
        if positions_key is not None and self._scheme(train) == "step_offset":
            (batch, length), d_model = x_BTD.shape[:2], x_BTD.shape[-1]
            longest = valid_BT.sum(axis=1).max().astype(jnp.int32)  # the batch's own length
            offsets_U = step_offsets(
                positions_key, num_steps, length, cfg.positional.max_len, longest
            )
            pos_UBT = offsets_U[:, None, None] + default_positions(x_BTD)[None]
            position = add_positional(
                jnp.zeros((num_steps * batch, length, d_model), jnp.float32),
                pos_UBT.reshape(num_steps * batch, length),
            ).reshape(num_steps, batch, length, d_model)
        else:
            position = add_positional(jnp.zeros(x_BTD.shape, jnp.float32), q_pos_BT)
        x_BTD = nn.Dropout(cfg.dropout_rate)(x_BTD, deterministic=not train)

        steps_U = jnp.arange(1, num_steps + 1, dtype=jnp.int32)
        step_signal_UD = STEP_SIGNALS[cfg.universal.step_signal](self, num_steps, x_BTD.shape[-1])
        zeros_BT = jnp.zeros(x_BTD.shape[:2], jnp.float32)
        carry = ActState(
            state_BTD=x_BTD,
            output_BTD=jnp.zeros(x_BTD.shape, jnp.float32),
            halting_BT=zeros_BT,
            remainder_BT=zeros_BT,
            steps_BT=zeros_BT,
        )
        recurrence = nn.scan(
            UniversalStep,
            variable_broadcast="params",  # one block: the same weights at every step
            # Per step: the caches (each step's keys and values differ), sown values, and
            # BatchNorm running statistics (the states' statistics differ per step, as in
            # recurrent batch norm, Cooijmans et al. 2017; its scale and shift stay shared).
            variable_axes={"cache": 0, "intermediates": 0, "diagnostics": 0, "batch_stats": 0},
            split_rngs={"params": False, "dropout": True},
            in_axes=(0, 0 if position.ndim == 4 else nn.broadcast, nn.broadcast),
            length=num_steps,
            unroll=num_steps if cfg.universal.unroll else 1,
        )
        carry, _ = recurrence(
            cfg,
            num_steps=num_steps,
            cross_attention=self.cross_attention,
            use_cache=self.use_cache,
            train=train,
            name="recurrence",
        )(carry, (steps_U, step_signal_UD), position, context)
        if cfg.universal.act:
            self._record_ponder(carry, valid_BT)
            return carry.output_BTD.astype(x_BTD.dtype)
        return carry.state_BTD

    def _record_ponder(self, carry: ActState, valid_BT):
        """Ponder cost tau * mean(N + R) and step statistics, over real positions only."""
        weights_BT = valid_BT.astype(jnp.float32)
        count = jnp.maximum(weights_BT.sum(), 1.0)
        rho_BT = carry.steps_BT + carry.remainder_BT  # N carries no gradient; R does.
        self.sow(
            "losses",
            "ponder_cost",
            self.config.universal.act_ponder_cost * (rho_BT * weights_BT).sum() / count,
        )
        self.sow("diagnostics", "ponder_mean", (carry.steps_BT * weights_BT).sum() / count)
        self.sow("diagnostics", "ponder_max", jnp.max(carry.steps_BT * weights_BT))
        self.sow("intermediates", "ponder_steps", carry.steps_BT)
        self.sow("intermediates", "ponder_remainders", carry.remainder_BT)


def stack_class(config: ModelConfig) -> type[TransformerStack]:
    """The stack every model family builds: universal (shared, recurrent) or N distinct layers."""
    return TransformerStack if config.universal is None else UniversalStack
