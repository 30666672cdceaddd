"""The TrIMS experiments the workflow runs, and the numbers their figures show.

compare: per model, `iterations` requests in original mode, then as many in shared mode.
distributions: shared-mode clients whose requests follow a popularity distribution, at several
concurrency levels, against a store whose budget is smaller than the model set (so the
distribution decides what stays resident).
"""

import contextlib
import json
import math
import os
from pathlib import Path

import numpy as np

from repro.errors import ReproError
from repro.fsutil import (copy_limited, first_repeated, fresh_directory, open_regular, read_json, removed_unless_done,
                           sha256_file, write_json)
from repro.stats import bootstrap_interval
from repro.traces import summarize_trace
from repro.trims.client import TRACE_FILES, Client, ClientOptions, holds_run_file, store_fields
from repro.trims.device import resolve_device
from repro.trims.models import check_file_size, load_manifest, load_manifest_file
from repro.trims.server import StoreConnection
from repro.trims.workload import plan_requests

LOAD_PHASES = ("read_params", "load_model", "create_prediction")


def publish_model(model_dir, store):
    """Upload a generated model (its files, then its manifest) to a GCS asset store (a GCSStore)."""
    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    for name in [*manifest["sha256"], "manifest.json"]:
        store.put(model_dir / name, f"{manifest['model']}/{name}")
    return manifest


def fetch_model(asset_store, model, base_path):
    """Copy `model` from the asset store (a directory or gs://bucket/prefix) into base_path/model,
    verifying every file against the sha256 its manifest records. The model is built beside its
    directory and moved into place when complete (staged_model): an interrupted or failed fetch
    leaves nothing that looks like a model, and a model fetched again stays as it was till then."""
    from repro.trims.models import MANIFEST, check_manifest_size, check_model_name, staged_model

    check_model_name(model)  # one path component: nothing is written outside base_path
    target = Path(base_path) / model
    if str(asset_store).startswith("gs://"):
        from repro.tracestore import GCSStore

        store = GCSStore(str(asset_store), what="asset store")
        with staged_model(target) as stage:
            store.get(f"{model}/manifest.json", stage / MANIFEST, check_size=check_manifest_size)
            manifest = _named(load_manifest_file(stage / MANIFEST), model, f"{asset_store}/{model}/{MANIFEST}")
            for name, expected in manifest["sha256"].items():
                store.get(f"{model}/{name}", stage / name, expected_sha256=expected,
                          check_size=lambda label, size: check_file_size(label, name, size, manifest))
            write_json(stage / MANIFEST, manifest)  # as checked, not as fetched
        return manifest
    source = Path(asset_store) / model
    manifest = _named(load_manifest(source), model, source / MANIFEST)  # checked before anything is written
    with contextlib.ExitStack() as opened:
        # opened as regular files before anything is written: a link to /dev/zero was copied till the disk was full
        files = {name: opened.enter_context(open_regular(source / name, str(source / name), "a model file"))
                 for name in manifest["sha256"]}
        sizes = {name: check_file_size(source / name, name, os.fstat(files[name].fileno()).st_size, manifest)
                 for name in files}
        with staged_model(target) as stage:
            for name, expected in manifest["sha256"].items():
                with open(stage / name, "wb") as out:
                    copy_limited(files[name], out, sizes[name])  # a file growing meanwhile: its checksum fails
                if sha256_file(stage / name) != expected:
                    raise ReproError(f"{source / name}: checksum mismatch while fetching (expected sha256 {expected})")
            write_json(stage / MANIFEST, manifest)
    return manifest


def _named(manifest, model, where):
    """`manifest` where it describes `model`: one copied from another model's directory was fetched
    under this one's name, and reported as the other."""
    if manifest["model"] != model:
        raise ReproError(f"{where}: model: expected {model!r}, the model fetched; got {manifest['model']!r}")
    return manifest


def _client(base_path, socket_path, traces, original, settings, extra):
    return Client(ClientOptions(base_path=Path(base_path), socket=Path(socket_path), original=original,
                                eager=settings["eager"], eager_async=settings["eager_async"],
                                cold_cache=settings["cold_cache"], profile_output=Path(traces),
                                device=resolve_device(settings["server"]["device"]),
                                experiment_description=extra.get("experiment", ""), run_id=extra.get("run_id", ""),
                                extra=extra))


def _client_fields(settings):
    """What a report records of its client's settings: runs drawn side by side must share them."""
    return {key: settings[key] for key in ("eager", "eager_async", "cold_cache", "iterations", "seed")}


def _failed(results, what):
    failed = [r for r in results if not r["ok"]]
    if failed:
        raise ReproError(f"{what}: {len(failed)} request(s) failed, first: request {failed[0]['iteration']} "
                         f"({failed[0]['model']}): {failed[0]['error']}")


def compare(run, run_original=True):
    """The compare experiment: the same requests in original mode (each loads the model from its file),
    then in shared mode (from the model store); shared mode only without `run_original`.
    `run(mode, original)` runs one mode; returns {mode: its result}.
    The workflow's `trims_compare` and `repro trims client compare` both run it."""
    modes = (("original", True), ("shared", False)) if run_original else (("shared", False),)
    return {mode: run(mode, original) for mode, original in modes}


def check_report_replaceable(out_dir):
    """ReproError where out_dir/report.json, which a run replaces, is no experiment's report: it may be
    the user's."""
    path = Path(out_dir) / "report.json"
    if not os.path.lexists(path):
        return
    try:
        report = None if path.is_symlink() else read_json(path, "an experiment's report.json")
    except ReproError:
        report = None
    if not isinstance(report, dict) or report.get("experiment") not in ("compare", "distribution"):
        raise ReproError(f"--out {out_dir}: {path} is not an experiment's report.json, and the run would replace it; "
                         "it may be yours: move it, or name another --out")


def run_compare(model, settings, base_path, socket_path, out_dir):
    """Original then shared requests of one model; return the report (also written to out_dir/report.json)."""
    out_dir = Path(out_dir)

    def run(mode, original):
        traces = out_dir / "traces" / mode
        client = _client(base_path, socket_path, traces, original, settings,
                         {"experiment": "compare", "run_id": f"compare-{model}-{mode}", **store})
        plan = [(model, i) for i in range(settings["iterations"])]
        results, wall = client.run(plan, 1)
        _failed(results, f"compare {model} ({mode})")
        return {"results": _beside(results, out_dir), "wall_s": wall}

    connection = StoreConnection(socket_path, timeout=30)
    try:
        store = store_fields(connection.status())
    finally:
        connection.close()
    _remove_report(out_dir)
    # both modes' earlier traces go before either runs: a cut run leaves no mode's, new or earlier
    emptied = [fresh_directory(directory, "--out", TRACE_FILES, holds_run_file)
               for directory in compare_trace_directories(out_dir)]
    with removed_unless_done(*emptied):
        modes = compare(run)
    report = {"experiment": "compare", "model": model, "store": store, "client": _client_fields(settings),
              "modes": modes}
    write_json(out_dir / "report.json", report)
    return report


def compare_trace_directories(out_dir):
    """A compare run's trace directories, one per mode, under `out_dir`/traces, which may not be a
    symbolic link: a rerun empties the modes' directories, which would be those of the link's target
    (an archived run, say)."""
    traces = Path(out_dir) / "traces"
    if traces.is_symlink():
        raise ReproError(f"--out {traces}: is a symbolic link; expected a directory this command made, which a rerun "
                         "empties: remove the link or name another --out")
    return [traces / mode for mode in ("original", "shared")]


def run_distribution(name, params, concurrency, settings, models, base_path, socket_path, out_dir):
    """Shared-mode requests following a popularity distribution at one concurrency level."""
    out_dir = Path(out_dir)
    plan = plan_requests(models, settings["iterations"], name, params, seed=settings["seed"])
    connection = StoreConnection(socket_path, timeout=30)
    connection.request({"op": "flush"})  # every run starts from an empty store
    before = connection.status()
    _remove_report(out_dir)
    with removed_unless_done(fresh_directory(out_dir / "traces", "--out", TRACE_FILES, holds_run_file)) as (traces,):
        client = _client(base_path, socket_path, traces, False, settings,
                         {"experiment": "distribution", "run_id": f"{name}-c{concurrency}", "distribution": name,
                          "distribution_params": params, "concurrent": concurrency, **store_fields(before)})
        results, wall = client.run(plan, concurrency)
        _failed(results, f"distribution {name} at concurrency {concurrency}")
    after = connection.status()
    connection.close()
    report = {"experiment": "distribution", "distribution": name, "params": params, "concurrency": concurrency,
              "results": _beside(results, out_dir), "wall_s": wall, "evictions": after["evictions"] - before["evictions"],
              "store": store_fields(before), "client": _client_fields(settings)}
    write_json(out_dir / "report.json", report)
    return report


def _remove_report(out_dir):
    """Remove an earlier run's report.json (check_report_replaceable has found it an experiment's) before
    its traces are replaced: a report never names traces of another run."""
    (Path(out_dir) / "report.json").unlink(missing_ok=True)


def _beside(results, out_dir):
    """`results` with each request's trace named relative to the report's directory (`out_dir`): the
    report is read from wherever it lies (another working directory, a copied clone) and its traces
    found beside it (read_report), never those of the working directory the reader runs in."""
    return [{**r, "trace": os.path.relpath(r["trace"], out_dir)} if r.get("trace") else r for r in results]


def read_report(path):
    """An experiment's report.json, its requests' traces named as paths from here (see _beside)."""
    report = read_json(path, "an experiment's report.json")
    modes = report.get("modes") if isinstance(report, dict) else None
    runs = [report, *(modes.values() if isinstance(modes, dict) else ())]
    for run in (run for run in runs if isinstance(run, dict) and isinstance(run.get("results"), list)):
        for result in run["results"]:
            if isinstance(result, dict) and isinstance(result.get("trace"), str):
                result["trace"] = str(Path(path).parent / result["trace"])
    return report


def _trace_phases(trace_path):
    """Total duration (us) of each phase of one request trace, keyed by event name (runtime
    initialisation before the timed request, in category 'ignore', left out)."""
    return {name: entry["total"] for name, entry in summarize_trace(trace_path)["events"].items()}


def _percentile(q):
    return lambda values, axis=None: np.percentile(values, q, axis=axis)


def compare_table(reports):
    """Per model and mode: median end-to-end latency (with its 95% percentile-bootstrap interval over
    the requests) and median model-loading latency, in ms."""
    rows = []
    for report in reports:
        if not isinstance(report.get("model"), str) or not report["model"]:
            raise ReproError(f"model: {str(report.get('model', 'missing'))[:40]}; expected the name of the model the run "
                             "compared")
        row = {"model": report["model"], **report.get("store", {})}
        modes = report["modes"]
        if not isinstance(modes, dict) or sorted(modes) != ["original", "shared"]:
            if isinstance(modes, dict):
                found = ", ".join(repr(mode[:40]) for mode in sorted(modes)[:4]) or "none"
            else:
                found = f"{json.dumps(modes)[:40]}, not a mapping"
            raise ReproError(f"modes: {found}; expected 'original' and 'shared', a compare run's two modes (its "
                             "speedup divides their latencies)")
        for mode, data in modes.items():
            # the first shared request loads the model into the store: steady state excludes it
            results = data["results"][1:] if mode == "shared" and len(data["results"]) > 1 else data["results"]
            if not results:
                raise ValueError(f"{mode} mode made no requests")
            latencies = _latencies_ms(results, mode)
            phases = [_trace_phases(r["trace"]) for r in results]
            row[f"{mode}_latency_ms"] = float(np.median(latencies))
            row[f"{mode}_latency_ci_ms"] = list(bootstrap_interval(latencies)[1:])
            row[f"{mode}_requests"] = len(latencies)
            row[f"{mode}_load_ms"] = float(np.median([sum(p.get(k, 0) for k in LOAD_PHASES) for p in phases])) / 1000
        row["speedup"] = row["original_latency_ms"] / row["shared_latency_ms"]
        row["load_speedup"] = row["original_load_ms"] / row["shared_load_ms"]
        rows.append(row)
    return rows


MAX_LATENCY_US = 1e12  # a request of eleven days: beyond, a report's number is no latency


def _latencies_ms(results, mode=None):
    """The requests' latencies in ms; ReproError where one failed (a finished experiment's have not)
    or its latency_us is no number of microseconds above 0 and at most MAX_LATENCY_US."""
    where = f"{mode} mode " if mode else ""
    for index, result in enumerate(results):
        if result.get("ok") is not True:
            raise ReproError(f"{where}request {index}: failed or not marked ok; expected the requests of a finished "
                             "experiment")
        value = result.get("latency_us")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_LATENCY_US:
            raise ReproError(f"{where}request {index}: latency_us {json.dumps(value)[:40]}; expected microseconds "
                             f"above 0, at most {MAX_LATENCY_US:g}")
    return np.array([r["latency_us"] for r in results], float) / 1000


def _check_requests(report):
    """ReproError where a report's requests are not those its run made: client.iterations of them per
    mode, numbered 0, 1, ... in order, each of the report's model (a compare run) or of a model named
    (a distribution run), each a store hit or not. A label edited (the report's model) or a request
    dropped would otherwise be drawn as a run that never happened."""
    client = report.get("client")
    iterations = client.get("iterations") if isinstance(client, dict) else None
    if type(iterations) is not int or iterations < 1:
        raise ReproError(f"client: iterations {str(iterations)[:40]}; expected the requests the run made per mode, a "
                         "whole number of at least 1")
    modes = report["modes"] if report["experiment"] == "compare" else {"": report}  # read by the table already
    for mode, run in modes.items():
        where = f"{mode} mode " if mode else ""
        results = run.get("results") if isinstance(run, dict) else None
        if not isinstance(results, list) or len(results) != iterations:
            count = len(results) if isinstance(results, list) else str(results)[:40]
            raise ReproError(f"{where}results: {count} request(s); expected client.iterations, {iterations}")
        for index, result in enumerate(results):
            result = result if isinstance(result, dict) else {}
            model = result.get("model")
            if report["experiment"] == "compare" and model != report["model"]:
                raise ReproError(f"{where}request {index}: model {str(model)[:40]!r}; expected the report's model "
                                 f"{str(report['model'])[:40]!r}")
            if not isinstance(model, str) or not model:
                raise ReproError(f"{where}request {index}: model {str(model)[:40]!r}; expected the name of a model")
            if type(result.get("iteration")) is not int or result["iteration"] != index:
                raise ReproError(f"{where}request {index}: iteration {str(result.get('iteration'))[:40]}; expected "
                                 f"{index} (the requests in the order the run made them)")
            if result.get("hit") not in (True, False, None):
                raise ReproError(f"{where}request {index}: hit {str(result.get('hit'))[:40]}; expected true, false "
                                 "or null (whether the store held the model)")


def _check_one_series(flag, paths, reports):
    """ReproError where reports drawn in one figure differ in what they ran: the store's settings
    (budget, eviction, tiers) or the client's (eager, cold cache, requests), which its caption does
    not tell apart, or, for distribution reports drawn as one series, a distribution's parameters."""
    first = {}
    for path, report in zip(paths, reports):
        series = (("parameters", report["distribution"]),) if "distribution" in report else ()
        for what, key in (*series, ("store", None), ("client", None)):
            value = report["params"] if key is not None else report.get(what, {})
            seen_path, seen = first.setdefault((what, key), (path, value))
            if seen != value:
                of = f"{key} {what}" if key is not None else f"{what} settings"
                raise ReproError(f"{flag} {path}: {of} {value}, and {seen_path}'s {seen}; expected the "
                                 "runs of one series (one store, one client's settings, one set of parameters per "
                                 "distribution)")


def summary(compare_paths, distribution_paths):
    """What the TrIMS figures show: the compare and distribution tables of these runs' reports, and the
    statistics of the compare runs' traces (under each report's traces/)."""
    from repro.traces import summarize


    def rows(table, path, experiment, flag):
        report = read_report(path)
        kind = report.get("experiment") if isinstance(report, dict) else None
        if kind != experiment:  # the other experiment's report, named under the other flag
            raise ReproError(f"{path}: experiment {str(kind)[:40]!r}; expected the report of a {experiment!r} "
                             f"experiment ({flag})")
        try:
            drawn = table([report])
            _check_requests(report)  # after the table's checks of each field it reads
            return drawn
        except (AttributeError, LookupError, TypeError, ValueError, ArithmeticError) as exc:
            raise ReproError(f"{path}: not an experiment's report.json ({type(exc).__name__}: {str(exc)[:200]})") from None
        except ReproError as exc:  # a trace it names, or no requests to draw intervals from
            raise ReproError(str(exc) if str(exc).startswith(f"{path}:") else f"{path}: {exc}") from None

    compared = [row for path in compare_paths for row in rows(compare_table, path, "compare", "--compare")]
    distributions = sorted((row for path in distribution_paths
                            for row in rows(distribution_table, path, "distribution", "--distributions")),
                           key=lambda r: (r["distribution"], r["concurrency"]))
    # one run twice (a report named twice, or two runs of one model): its bars and traces counted twice
    for flag, table, key in (("--compare", compared, ("model",)), ("--distributions", distributions,
                                                                   ("distribution", "concurrency"))):
        twice = first_repeated(tuple(row[k] for k in key) for row in table)
        if twice is not None:
            raise ReproError(f"{flag}: two reports of {' '.join(map(str, twice))}; expected one report per run")
    for flag, paths in (("--compare", compare_paths), ("--distributions", distribution_paths)):
        _check_one_series(flag, paths, [read_report(path) for path in paths])
    traces = summarize([Path(p).parent / "traces" for p in compare_paths], group_by=("model_name", "upr_enabled"))
    return {"compare": compared, "distributions": distributions, "trace_statistics": traces["groups"]}


def distribution_table(reports):
    """Per distribution and concurrency: latency percentiles (ms) with 95% percentile-bootstrap intervals
    over the requests, requests/s and store hit rate (with its interval)."""
    rows = []
    for report in reports:
        if not (isinstance(report.get("distribution"), str) and "params" in report
                and type(report.get("concurrency")) is int and report["concurrency"] >= 1):
            raise ReproError("expected a distribution report: the distribution's name, its params and a concurrency "
                             "of at least 1")
        wall, evictions = report.get("wall_s"), report.get("evictions")
        if type(wall) not in (int, float) or not 0 < wall < math.inf:
            raise ReproError(f"wall_s: {str(wall)[:40]}; expected the run's length, a positive number of seconds")
        if type(evictions) is not int or evictions < 0:
            raise ReproError(f"evictions: {str(evictions)[:40]}; expected the store's count of evictions (0 or more)")
        latencies = _latencies_ms(report["results"])
        hits = [r["hit"] for r in report["results"]]
        row = {"distribution": report["distribution"], "concurrency": report["concurrency"], "requests": len(hits)}
        for q in (50, 90, 99):
            row[f"p{q}_ms"], *row[f"p{q}_ci_ms"] = bootstrap_interval(latencies, _percentile(q))
        row["hit_rate"], *row["hit_rate_ci"] = bootstrap_interval([float(bool(h)) for h in hits], np.mean)
        rows.append({**row, "requests_per_s": len(latencies) / report["wall_s"], "evictions": report["evictions"],
                     **report.get("store", {})})
    return sorted(rows, key=lambda r: (r["distribution"], r["concurrency"]))
