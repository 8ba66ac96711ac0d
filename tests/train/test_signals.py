"""SIGTERM/SIGINT become a flag inside StopOnSignal; handlers are restored afterwards."""

import os
import signal
import time

import pytest

from transformer_jax.train.signals import StopOnSignal


def _wait_for(predicate, timeout_s=2.0):
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_sets_flag_and_handlers_are_restored(signum):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with StopOnSignal() as stop:
        assert not stop.stop_requested()
        os.kill(os.getpid(), signum)
        assert _wait_for(stop.stop_requested)
        assert stop.received == signum
    assert {s: signal.getsignal(s) for s in before} == before


def test_second_sigint_raises_keyboard_interrupt():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), StopOnSignal() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert _wait_for(stop.stop_requested)
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(lambda: False, timeout_s=2.0)
    assert signal.getsignal(signal.SIGINT) == before


def test_only_listed_signals_are_caught():
    before = signal.getsignal(signal.SIGINT)
    with StopOnSignal(signums=(signal.SIGTERM,)):
        assert signal.getsignal(signal.SIGINT) == before
