"""The signals that stop a command as Ctrl-C does (repro.commands raises them as KeyboardInterrupt),
and putting them off across a step that must not be cut in two: a child forked but not yet held by
a Popen object, a temporary file made but not yet named for removal; and across an import, which
an exception leaves half done (a C extension's half-initialised module crashes the interpreter's
exit with SIGSEGV: numpy's, cut by SIGTERM as a command imported it).

Handlers, not the signal mask: the mask is per thread, and a process-directed signal goes to any
thread (a forked child inherits the mask, which is why repro.pool blocks them while it forks)."""

import contextlib
import os
import signal
import threading
import time

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_IMPORT_FRAMES = "<frozen importlib._bootstrap"  # importlib's own frames, _bootstrap and _bootstrap_external
_RESEND_S = 0.02  # how often a signal put off by an import comes again
_IMPORT_PATIENCE_S = 30.0  # an import that takes longer (one that hangs) is cut after all


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


def as_worker():
    """In a worker process its parent started with the stop signals blocked: Ctrl-C and a hang-up to
    the group reach the parent, which stops its workers; SIGTERM (terminate()) ends the worker at once,
    without the parent's handler. What came while it started is then discarded."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def raise_deferred(caught):
    """Raise the first signal that deferred() put off, as it came: its own handler runs now."""
    if caught:
        signal.raise_signal(caught[0])


def importing(frame):
    """Whether `frame` (a handler's frame) or one that called it is importlib's: an import is under way."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORT_FRAMES):
            return True
        frame = frame.f_back
    return False


class AfterImports:
    """For a handler that raises: `put_off(signum, frame)` is True where the signal came during an
    import, which it then sends again shortly (to this process alone), until the import is over or
    has taken _IMPORT_PATIENCE_S."""

    def __init__(self):
        self._since = None

    def put_off(self, signum, frame):
        if not importing(frame):
            return False
        now = time.monotonic()
        self._since = self._since or now
        if now - self._since > _IMPORT_PATIENCE_S:
            return False
        resend = threading.Timer(_RESEND_S, os.kill, (os.getpid(), signum))
        resend.daemon = True  # a command that ends first does not wait for it
        resend.start()
        return True
