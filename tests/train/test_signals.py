"""SIGTERM/SIGINT become a flag inside StopOnSignal; handlers are restored afterwards.

signal.raise_signal delivers to the calling (main) thread, whose Python handler runs before the
next statement, so each assertion holds at any machine speed (no waiting for a signal).
"""

import signal

import pytest

from transformer_jax.train.signals import StopOnSignal


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_sets_flag_and_handlers_are_restored(signum):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with StopOnSignal() as stop:
        assert not stop.stop_requested()
        signal.raise_signal(signum)
        assert stop.stop_requested()
        assert stop.received == signum
    assert {s: signal.getsignal(s) for s in before} == before


def test_second_sigint_raises_keyboard_interrupt():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), StopOnSignal() as stop:
        signal.raise_signal(signal.SIGINT)
        assert stop.stop_requested()
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == before


def test_only_listed_signals_are_caught():
    before = signal.getsignal(signal.SIGINT)
    with StopOnSignal(signums=(signal.SIGTERM,)):
        assert signal.getsignal(signal.SIGINT) == before
