"""The signals that stop a command as Ctrl-C does (repro.commands raises them as KeyboardInterrupt),
and putting them off across a step that must not be cut in two: a child forked but not yet held by
a Popen object, a temporary file made but not yet named for removal.

Handlers, not the signal mask: the mask is per thread, and a process-directed signal goes to any
thread (a forked child inherits the mask, which is why repro.pool blocks them while it forks)."""

import contextlib
import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def deferred():
    """Put the stop signals off while the block runs; yield the list of those that came, for
    raise_deferred once what the block made is in hand. Ignored signals stay ignored (nohup)."""
    caught, previous = [], {}
    if threading.current_thread() is threading.main_thread():  # handlers are the main thread's
        for signum in STOP_SIGNALS:
            handler = signal.getsignal(signum)
            if handler not in (signal.SIG_IGN, None):  # None: not set from Python
                previous[signum] = handler
                signal.signal(signum, lambda number, frame: caught.append(number))
    try:
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def raise_deferred(caught):
    """Raise the first signal that deferred() put off, as it came: its own handler runs now."""
    if caught:
        signal.raise_signal(caught[0])
