"""Forked worker processes that run a list of tasks, each worker its share in order, talking with
the parent through a pipe each.

With n workers, worker k runs tasks k, k + n, k + 2n, ...: a parent that takes the tasks in order
waits on one worker at a time while the others work ahead. The workers are forked, so the tasks
and what the parent holds reach them without pickling; the messages of a task and the parent's
replies are pickled through its worker's pipe.

A task that raises sends a failure in place of its next message, and its worker goes on with its
next task: the parent's `recv` raises TaskFailed, and the parent decides what to do (it must not
reply to that task). A worker that is gone (killed) fails every task left to it. Workers ignore
Ctrl-C and hang-ups: the parent stops them by their pid when the pool is closed, on success, error and
interrupt alike, so none outlives it.
"""

import multiprocessing
import os
import signal

from repro.stopsignals import STOP_SIGNALS, as_worker

_FAILED = "repro.pool: task failed"


class TaskFailed(Exception):
    """The task raised in its worker, or its worker is gone."""


def usable_cpus():
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _serve(run, tasks, conn):
    """A worker's life: run each task with the pipe; stop when the parent has closed it."""
    as_worker()  # the parent blocked the stop signals while it forked this worker
    try:
        for task in tasks:
            try:
                run(task, conn)
            except (EOFError, BrokenPipeError):
                raise
            except Exception:  # the parent is told; it does the task its own way, or reports it
                conn.send(_FAILED)
    except (EOFError, BrokenPipeError):
        pass  # the parent has closed the pool
    finally:
        conn.close()


class Pool:
    """`workers` forked processes running run(task, conn) for each of `tasks`; task i talks with
    the parent through recv(i) and send(i, message). Use it as a context manager."""

    def __init__(self, run, tasks, workers):
        context = multiprocessing.get_context("fork")
        self._workers = []
        try:
            for k in range(workers):
                parent, child = context.Pipe()
                process = context.Process(target=_serve, args=(run, tasks[k::workers], child), daemon=True)
                # a signal that stops the parent (Ctrl-C, SIGTERM, SIGHUP) waits until the worker is
                # recorded, so that close() stops it, and the worker takes no parent's handler
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
                try:
                    process.start()
                    child.close()
                    self._workers.append((process, parent))
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        except BaseException:
            self.close(wait=0)
            raise

    def worker(self, i):
        """The worker that runs task i (a number)."""
        return i % len(self._workers)

    def _conn(self, i):
        return self._workers[self.worker(i)][1]

    def recv(self, i):
        """Task i's next message; TaskFailed where the task raised or its worker is gone."""
        try:
            message = self._conn(i).recv()
        except (EOFError, OSError):
            raise TaskFailed from None
        if isinstance(message, str) and message == _FAILED:
            raise TaskFailed
        return message

    def send(self, i, message):
        try:
            self._conn(i).send(message)
        except OSError:
            pass  # its worker is gone: the next recv says so

    def close(self, wait=1.0):
        """Close the pipes (a worker waiting on one ends), wait up to `wait` seconds for the
        workers to end, and stop those still running, each by its pid."""
        for _, conn in self._workers:
            conn.close()
        for process, _ in self._workers:
            process.join(timeout=wait)
            if process.is_alive():
                process.terminate()
                process.join()
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(wait=1.0 if exc_type is None else 0)  # on error or Ctrl-C the workers stop at once
