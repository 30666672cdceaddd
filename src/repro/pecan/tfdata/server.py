"""The service's processes: `python -m repro.pecan.tfdata.server dispatcher|worker ...`.

Each process reports what its server itself knows, every REPORT_INTERVAL_S, in a JSON status file
(written atomically): the dispatcher its bound address and registered workers, a worker its
address and the tasks it runs. repro.pecan.tfdata.service starts them and reads those files.

A worker's vCPU share: the process is pinned to its CPUs (os.sched_setaffinity, before TensorFlow
starts its thread pools) and TensorFlow's intra- and inter-op pools get that many threads; the
pipeline's own private threadpool has the same size (repro.pecan.tfdata.ops.dataset).

Both load only the servers' module of TensorFlow (repro.pecan.tfdata.service_servers), not the whole
of it: the pipelines run in TensorFlow's runtime, which that module loads.
"""

import argparse
import os
import signal
import socket
import sys
import time

from repro.processes import write_record

REPORT_INTERVAL_S = 0.25
# Miniature-scale timing: a worker that joins mid-job gets its task at its next heartbeat, and a
# stopped worker's task is given up after the dispatcher's timeout (TensorFlow's defaults: 30 s, 10 s).
WORKER_HEARTBEAT_MS = 500
WORKER_TIMEOUT_MS = 3000


def _directory_identity(directory):
    try:
        found = os.stat(directory)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _reporter(path):
    """A function that writes this server's status record at `path`, and ends the process where the
    directory it lies in was removed since the start (with the service's records: `make clean`, say),
    even where a write of its own made it again: no record could find or stop the server any more."""
    directory = os.path.dirname(os.path.abspath(path))
    started_in = _directory_identity(directory)  # None: not there yet; the first record makes it

    def report(fields):
        nonlocal started_in
        if started_in is not None and _directory_identity(directory) != started_in:
            os._exit(0)  # TensorFlow's server threads would hold up an interpreter's exit
        write_record(path, {**fields, "pid": os.getpid(), "at": time.time()})
        started_in = started_in or _directory_identity(directory)

    return report


def dispatcher(args):
    report = _reporter(args.status)  # before TensorFlow's import: a directory removed meanwhile counts too
    from repro.pecan.tfdata import service_servers

    service = service_servers()
    config = service.DispatcherConfig(
        port=args.port, work_dir=args.work_dir, fault_tolerant_mode=True, worker_timeout_ms=WORKER_TIMEOUT_MS)
    server = service.DispatchServer(config)
    port = server._server.bound_port()
    while True:
        report({"role": "dispatcher", "address": f"localhost:{port}", "workers": server._num_workers()})
        time.sleep(REPORT_INTERVAL_S)


def worker(args):
    report = _reporter(args.status)  # before TensorFlow's import: a directory removed meanwhile counts too
    cpus = [int(c) for c in args.cpus.split(",")]
    os.sched_setaffinity(0, cpus)
    # TensorFlow's runtime sizes its intra- and inter-op pools from these when it starts
    os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(args.threads)
    from repro.pecan.tfdata import service_servers

    service = service_servers()
    avoid = {int(port) for port in args.avoid_ports.split(",") if port}
    config = service.WorkerConfig(
        dispatcher_address=args.dispatcher, worker_address=f"{args.host}:%port%", port=free_port(avoid),
        heartbeat_interval_ms=WORKER_HEARTBEAT_MS)
    server = service.WorkerServer(config)
    address = f"{args.host}:{server._server.bound_port()}"
    while True:
        report({"role": "worker", "address": address, "tasks": server._num_tasks(), "cpus": cpus,
                              "threads": args.threads})
        time.sleep(REPORT_INTERVAL_S)


def free_port(avoid):
    """A port free now and not in `avoid`: each port the kernel offers from `avoid` stays bound until
    one outside it is found, so it is not offered twice. The server binds it a moment later."""
    held = []
    try:
        while True:
            sock = socket.socket()
            held.append(sock)
            sock.bind(("", 0))
            port = sock.getsockname()[1]
            if port not in avoid:
                return port
    finally:
        for sock in held:
            sock.close()


def exit_with(parent):
    """Have the kernel send SIGTERM when the process that started this one ends (PR_SET_PDEATHSIG):
    a run's workers must not outlive a run killed while it waited inside TensorFlow."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before the request took effect
        sys.exit(0)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m repro.pecan.tfdata.server")
    sub = parser.add_subparsers(dest="role", required=True)
    d = sub.add_parser("dispatcher")
    d.add_argument("--port", type=int, required=True)
    d.add_argument("--work-dir", required=True, help="fault-tolerant journal of the dispatcher's state")
    d.add_argument("--status", required=True)
    d.set_defaults(func=dispatcher)
    w = sub.add_parser("worker")
    w.add_argument("--dispatcher", required=True, help="host:port")
    w.add_argument("--host", required=True, help="the name this worker registers under (localhost: a local worker)")
    w.add_argument("--threads", type=int, required=True)
    w.add_argument("--cpus", required=True, help="comma-separated CPU numbers this worker may run on")
    w.add_argument("--status", required=True)
    w.add_argument("--avoid-ports", default="", help="comma-separated ports of workers the dispatcher may still list")
    w.set_defaults(func=worker)
    for role in (d, w):
        role.add_argument("--parent", type=int, help="exit when this process (the one that started it) ends")
    args = parser.parse_args(argv)
    if args.parent:
        exit_with(args.parent)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
