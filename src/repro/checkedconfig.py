"""The Snakefile's config check, done once per distinct config: `repro.config.validate_config`'s
result is kept under .snakemake/ and reused while nothing it depends on changes.

Every Snakemake invocation (a dry-run, a no-op rerun, each cluster job) parses the Snakefile, and
validating there imports jsonschema and the registries (about 0.05 s of a 1 s start). The kept
result is keyed by what validation reads: the merged config itself, the environment variables its
paths name (and HOME, for `~`), where its strings lead as paths (the checks resolve links), and
the package's source files (the schema, the registries and the checks), by name, size and
modification time. Any change there validates afresh; only a config
that passed is kept, with a digest of its name and content: one edited or damaged since is
validated afresh, never used as it is. What the installed packages provide (the extras a setting needs) is checked
again at every start, since installing or removing one leaves all of that unchanged.

This module imports nothing beyond the standard library until it has to validate.
"""

import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from repro.fsutil import read_at_most

_ENV_VAR = re.compile(r"\$(\w+|\{\w+\})")  # as repro.fsutil.expand_path expands them
_PACKAGE = Path(__file__).resolve().parent
_KEPT_NAME = re.compile(r"config-[0-9a-f]{32}\.json")  # as _key names them
KEPT_LIMIT = 64 << 20  # a kept config is the JSON of a config file of at most 4 MiB and 200,000 values


def config_source(files, command_line_files=(), overrides=None):
    """What a config error names as its source, as `repro config check` does: the config files in
    the order they were merged (the Snakefile's own, then each --configfile), then --config where
    it set anything."""
    given = [str(path) for path in command_line_files]
    named = {}  # absolute path -> as named last: a file given again by another name is named once
    for path in [str(path) for path in files if str(path) not in given] + given:
        named[os.path.abspath(path)] = path
    return " + ".join([*named.values(), *(["--config"] if overrides else [])]) or "config"


def checked_config(config, source, cache_dir, files=()):
    """Validate `config` in place (schema defaults filled in, paths expanded, references checked)
    as `repro.config.validate_config` does, reusing a result kept in `cache_dir` for the same inputs.
    `files`, the config files it was merged from, are read as `repro config check` reads them: what
    the merged mapping cannot show (a key written twice, of which Snakemake's loader keeps the last;
    an oversized file) is refused."""
    from repro.config import read_config_file

    for path in dict.fromkeys(files):
        read_config_file(path)
    _check_size(config, source)
    try:
        text = json.dumps(config, allow_nan=False)  # in order: the rules' params keep the config's key order
    except (TypeError, ValueError):  # not plain JSON data (e.g. NaN, which validation refuses): no keeping
        text = None
    if text is None or json.loads(text) != config:  # tuples, non-string keys: keep nothing
        return _validate(config, source)
    path = Path(cache_dir) / f"config-{_key(text)}.json"
    try:
        kept = json.loads(_read_kept(path))
        checked, extras = kept["config"], kept["extras"]
        if kept["digest"] != _digest(path, checked, extras):  # edited or damaged since, or another key's
            raise ValueError(f"{path}: not a kept config")
    except (OSError, ValueError, KeyError, TypeError):
        _validate(config, source)
        _keep(path, config)
        return config
    config.clear()
    config.update(checked)
    if extras:
        from repro.config import _require_extra

        for key, extra, module in extras:
            _require_extra(source, key, extra, module)
    return config


def _read_kept(path):
    """The text of a kept config: a regular file (not followed through a link) of at most KEPT_LIMIT
    bytes, or OSError. A FIFO in its place would wait forever for a writer, a link to /dev/zero
    fill the memory; either is read as no kept config."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        data = read_at_most(fh, KEPT_LIMIT)
    if len(data) > KEPT_LIMIT:
        raise OSError(f"{path}: larger than a kept config")
    return data.decode()


MAX_DEPTH = 64  # as repro.yamlfile bounds the files it reads
MAX_VALUES = 200_000


def _check_size(config, source):
    """Snakemake's own YAML loading shares an aliased value between its uses, so a config file's
    anchor bomb arrives here small in memory and vast to walk (encoding it to JSON, the schema
    check): count its values as expanded, each shared one measured once, and refuse it."""
    sizes = {}

    def size(value, depth):
        if not isinstance(value, (dict, list)):
            return 1
        if depth > MAX_DEPTH:
            raise _error(source, f"nested more than {MAX_DEPTH} levels deep")
        if id(value) not in sizes:
            children = value.values() if isinstance(value, dict) else value
            sizes[id(value)] = 1 + sum(size(child, depth + 1) for child in children)
            if sizes[id(value)] > MAX_VALUES:
                raise _error(source, f"more than {MAX_VALUES} values with its aliases expanded")
        return sizes[id(value)]

    size(config, 0)


def _error(source, message):
    from repro.errors import ReproError

    return ReproError(f"{source}: {message}")


def _validate(config, source):
    from repro.config import validate_config

    return validate_config(config, source)


def _key(text):
    names = sorted({match.group(1).strip("{}") for match in _ENV_VAR.finditer(text)} | {"HOME"})
    digest = hashlib.sha256(text.encode())
    digest.update(json.dumps({name: os.environ.get(name) for name in names}).encode())
    digest.update(json.dumps(_real_paths(text)).encode())
    sources = []
    for folder, dirs, files in os.walk(_PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        sources += [os.path.join(folder, name) for name in files if name.endswith((".py", ".yaml", ".json"))]
    for source in sorted(sources):
        stat = os.stat(source)
        digest.update(f"{source}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def _real_paths(text):
    """Where each of the config's strings, and results/, leads as a path: the checks compare paths
    resolved (a trace store that is a link to results/, a model directory holding the store's
    state), so a link made or changed since validates afresh. A few hundred strings: milliseconds."""
    strings = set()

    def collect(value):
        if isinstance(value, str):
            strings.add(value)
        elif isinstance(value, (dict, list)):
            for child in value.values() if isinstance(value, dict) else value:
                collect(child)

    collect(json.loads(text))
    real = {}
    for string in sorted(strings | {"results"}):
        try:
            real[string] = os.path.realpath(os.path.expanduser(string))
        except (ValueError, OSError):  # a NUL byte, a name too long: validation names it
            real[string] = None
    return real


def _digest(path, checked, extras):
    """What a kept config is recognised by: its name (the key of what it was checked for) and its
    content, as written. A kept config edited by hand, cut, or copied from another key's name is not
    reused; it is validated afresh."""
    text = json.dumps({"config": checked, "extras": extras})  # as _keep wrote it: JSON keeps the key order
    return hashlib.sha256(f"{Path(path).name}\n{text}".encode()).hexdigest()


def _keep(path, config):
    """Write the checked config (and the extras it needs) atomically; drop older ones."""
    from repro.config import needed_extras

    record = {"config": config, "extras": needed_extras(config)}
    text = json.dumps(record)  # not sorted: a reused config has the key order validation gave it
    if json.loads(text)["config"] != config:  # validation added what JSON cannot hold: keep nothing
        return
    text = json.dumps({**record, "digest": _digest(path, record["config"], record["extras"])})
    if path.parent.is_symlink():  # the older ones dropped below would be wherever it leads: keep nothing
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob("config-*.json"):
            if old != path and _KEPT_NAME.fullmatch(old.name):
                old.unlink(missing_ok=True)
        # a new file of its own: a link put at a predictable name would be written through
        fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with open(fd, "w") as fh:
                fh.write(text)
            os.replace(partial, path)
        except BaseException:
            os.unlink(partial)
            raise
    except OSError:  # a read-only working directory: validate every time
        pass
