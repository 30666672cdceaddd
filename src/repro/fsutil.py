"""Atomic output: write to a temporary file beside the target, then rename over it.

A reader (or Snakemake after a crash) never sees a half-written file under the final name.
Paths from config and tool files get `~` and `$VAR` expanded here (`expand_path`).
A target that cannot be written (a directory, a read-only or full file system) is a ReproError
naming it; JSON output never holds NaN or Infinity, which strict JSON readers refuse.
"""

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path, PurePosixPath

from repro import stopsignals
from repro.errors import OutputError, ReproError, is_utf8


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates its file readable by its owner only; the output gets the mode open() would give it
OUTPUT_MODE = 0o666 & ~_umask()
DIRECTORY_MODE = 0o777 & ~_umask()  # and a directory made with mkdtemp (0o700) the mode mkdir would give it


@contextlib.contextmanager
def atomic_path(target):
    """Yield a temporary path in the target's directory; rename it to `target` on success."""
    target = Path(target)
    check_output(target, str(target))
    tmp = None
    try:  # from the moment the temporary exists: an exception, a stop signal's too, removes it
        with stopsignals.deferred() as caught:  # until `tmp` names it
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            except OSError as exc:
                # mkdir says "File exists" where a parent is a file: name that parent
                blocker = not_a_directory(target.parent)
                if blocker is not None:
                    raise OutputError(f"{target}: cannot write: {blocker} is not a directory") from None
                raise OutputError(f"{target}: cannot write ({exc.strerror})") from None
        os.close(fd)
        stopsignals.raise_deferred(caught)
        yield Path(tmp)
        os.chmod(tmp, OUTPUT_MODE)
        os.replace(tmp, target)
    except BaseException as exc:
        if tmp is None:
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and (exc.filename is None or str(exc.filename) == tmp):
            raise OutputError(f"{target}: cannot write ({exc.strerror or exc})") from None
        raise


def not_a_directory(path):
    """The first of `path`'s parents, or `path`, that exists and is not a directory (where no directory
    can be made), or None."""
    path = Path(path)
    return next((p for p in (*reversed(path.parents), path) if p.exists() and not p.is_dir()), None)


def check_text_name(path, what):
    """ReproError unless the name of `path` is UTF-8: a file name's other bytes come from the file system
    as lone surrogates, which no UTF-8 output (a CSV row, a JSON string) can hold. `what`: where the
    name goes."""
    if not is_utf8(str(path)):
        raise ReproError(f"{path}: the file name is not UTF-8 text, and {what}; rename the file")


def check_output(target, label):
    """OutputError, naming `label`, when `target` exists and is not a regular file. Renaming a new file over
    a device, FIFO, socket or symlink would replace that node (as root, /dev/full) rather than write to it;
    a directory cannot be replaced. lstat, so a symlink is refused rather than followed."""
    try:
        kind = os.lstat(target).st_mode
    except (OSError, ValueError):  # not there (a new file), or a parent that is no directory: the writer names it
        return
    if stat.S_ISREG(kind):
        return
    if stat.S_ISDIR(kind):
        raise OutputError(f"{label}: cannot write: it is a directory")
    what = "a symbolic link" if stat.S_ISLNK(kind) else file_kind(kind)
    raise OutputError(f"{label}: is {what}; expected a regular file or a new path to write the output to")


def write_text(target, text):
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def _non_finite(obj, where=""):
    """The key path of the first NaN or infinity in `obj`, or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "(top level)"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found:
            return found
    return None


def json_text(target, obj):
    """The text write_json writes to `target` (named where `obj` holds NaN or Infinity)."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, default=str, allow_nan=False)
    except ValueError:
        raise ReproError(f"{target}: {_non_finite(obj)} is not a finite number; JSON output holds no NaN or "
                         "Infinity") from None
    return text + "\n"


def write_json(target, obj):
    write_text(target, json_text(target, obj))


# An input is a regular file: a FIFO would hang its reader and a device such as /dev/zero never ends.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
JSON_LIMIT = 256 << 20  # the JSON files the commands read (calibrations, metrics, summaries) are far smaller


def file_kind(mode):
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path, label, what, mode="rb", **kwargs):
    """`path` opened for reading where it is a regular file; ReproError naming it (as `label`) and
    `what` it should be otherwise. OSError (missing, unreadable) is left to the caller to name.
    Opened without blocking, so a FIFO is refused instead of waiting for a writer."""
    fd = _regular_descriptor(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), label, what)
    # open() owns the descriptor from here, and closes it where it fails: closing it again replaced
    # its error (a stop signal's too) with EBADF, or closed a descriptor opened since under that number
    return open(fd, mode, **kwargs)


def copy_limited(source, target, limit):
    """Copy at most `limit` bytes from the file object `source` to `target`; return how many."""
    copied = 0
    while copied < limit and (block := source.read(min(limit - copied, 1 << 20))):
        target.write(block)
        copied += len(block)
    return copied


def open_lock(path, label):
    """`path` opened for appending, as a file to flock: created where missing, never truncated (a link
    is followed, the file it names left as it was). ReproError naming `label` where it is no regular
    file: a FIFO opened for writing waited forever for a reader."""
    return open(_append_descriptor(path, label, "a lock file", follow=True), "a")


def open_log(path, label):
    """`path` opened for appending a program's output (binary, created where missing): ReproError
    naming `label` and the path where it is a symbolic link (appended to, the file it names took the
    output) or no regular file."""
    return open(_append_descriptor(path, f"{label} {path}", "a log file", follow=False), "ab")


def _append_descriptor(path, label, what, follow):
    """A descriptor of the regular file `path` opened for appending, created where missing, opened
    without blocking (a FIFO is refused, not waited on); a link refused unless `follow`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise ReproError(f"{label}: is a symbolic link; expected {what} of its own") from None
        check_regular(path, label, what)  # a FIFO without a reader (ENXIO), a directory
        raise ReproError(f"{label}: cannot open ({exc.strerror})") from None
    return _regular_descriptor(fd, label, what)


def _regular_descriptor(fd, label, what):
    """`fd` (opened without blocking), made blocking where it is a regular file; otherwise closed and
    ReproError naming `label` and `what` it should be."""
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise ReproError(f"{label}: is {file_kind(kind)}; expected a regular file ({what})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path, label, what):
    """ReproError unless `path` (followed through links) is a regular file; a missing one is left to
    the reader."""
    try:
        kind = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(kind):
        raise ReproError(f"{label}: is {file_kind(kind)}; expected a regular file ({what})")


def read_at_most(fh, limit):
    """At most `limit` + 1 bytes of the binary file object `fh`, so a caller sees whether it holds
    more than `limit`. Read in steps sized by what the file holds: read(n) takes n bytes of memory
    before it reads, so a bound of hundreds of MiB was taken whole for a file of a few bytes."""
    parts, total = [], 0
    step = min(os.fstat(fh.fileno()).st_size, limit) + 1
    while total <= limit and (part := fh.read(min(step, limit + 1 - total))):
        parts.append(part)
        total += len(part)
        step = 1 << 20  # a file that grew since: the rest in blocks
    return b"".join(parts)


def read_bounded(path, label, what, limit):
    """The bytes of the regular file `path`, at most `limit` of them; ReproError naming it (as
    `label`) where it is no regular file or larger. OSError is left to the caller to name."""
    with open_regular(path, label, what) as fh:
        data = read_at_most(fh, limit)
    if len(data) > limit:
        raise ReproError(f"{label}: larger than {size_text(limit)}; expected {what}")
    return data


def size_text(count):
    """`count` bytes as a person reads them: whole MiB, KiB or bytes."""
    return next(f"{count >> shift} {unit}" for shift, unit in ((20, "MiB"), (10, "KiB"), (0, "bytes"))
                if count >= 1 << shift or not shift)


def read_json(path, what, label=None, limit=JSON_LIMIT):
    """The JSON in `path`; ReproError naming the file (as `label`, default the path) and `what` it
    should hold, where it cannot be read, is no regular file, is larger than `limit` bytes, nests
    too deeply or is not strict JSON (NaN and Infinity are not)."""
    label = label or str(path)
    try:
        data = read_bounded(path, label, what, limit)
    except OSError as exc:
        raise ReproError(f"{label}: cannot read ({exc.strerror})") from None
    return loads_json(data, label, what)


def read_text(path, label, what, limit=JSON_LIMIT):
    """The UTF-8 text of the regular file `path`, at most `limit` bytes; ReproError naming it (as
    `label`) and `what` it should be otherwise. OSError is left to the caller to name."""
    try:
        return read_bounded(path, label, what, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise ReproError(f"{label}: not a text file (expected {what})") from None


def read_csv(path, label, what, limit=JSON_LIMIT):
    """The rows (dicts) of the CSV file `path`, read as read_text reads it; ReproError naming it where
    it cannot be read or is not CSV."""
    import csv
    import io

    try:
        text = read_text(path, label, what, limit).removeprefix("\ufeff")  # a spreadsheet's byte order mark
        reader = csv.DictReader(io.StringIO(text, newline=""))
        twice = first_repeated(reader.fieldnames or ())
        if twice is not None:  # a row's value of it would be the last column's, silently
            raise ReproError(f"{label}: its header names column {twice[:80]!r} twice; expected {what} with each column once")
        return list(reader)
    except OSError as exc:
        raise ReproError(f"{label}: cannot read ({exc.strerror})") from None
    except csv.Error as exc:
        raise ReproError(f"{label}: not CSV ({exc}; expected {what})") from None


def _no_constant(name):
    raise ValueError(f"{name} is not a number JSON holds")


def first_repeated(values):
    """The first of `values` (hashable) that appears a second time, or None."""
    seen = set()
    return next((value for value in values if value in seen or seen.add(value)), None)


def file_identity(path):
    """What tells two names of one file apart from two files: (device, inode) where it exists, a hard
    link's as its original's; else the resolved path."""
    try:
        info = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return info.st_dev, info.st_ino


def first_named_twice(paths):
    """The first of `paths` that names a file named before it (the same path, a symlink or a hard link
    to it), or None."""
    seen = set()
    for path in paths:
        identity = file_identity(path)
        if identity in seen:
            return path
        seen.add(identity)
    return None


def repeated_key(pairs):
    """The first key that the (key, value) pairs of a JSON object name twice, or None."""
    return first_repeated(key for key, _ in pairs)


def unique_keys(pairs):
    """json's object_pairs_hook: an object that names a key twice is refused (JSON readers differ on
    which of the two values counts)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError(f"key {repeated_key(pairs)!r} appears twice in one object")
    return obj


# What the values a JSON file holds may take once parsed. The file's size bounds it poorly: a 250 MiB
# file of `{},` is 87 million dictionaries, several GB
PARSED_LIMIT = 512 << 20


def parsed_size(data):
    """An upper bound, in bytes, on the memory the JSON `data` (bytes or text) takes parsed: each
    object or list, each value or key (a ',' or ':' before it) and each string, at what CPython gives it."""
    brace, bracket, comma, colon, quote = (b"{", b"[", b",", b":", b'"') if isinstance(data, bytes) else "{[,:\""
    return (len(data) + 184 * data.count(brace) + 72 * data.count(bracket) + 32 * (data.count(comma) + data.count(colon))
            + 25 * data.count(quote))


def loads_json(data, label, what):
    """Strict JSON from `data` (bytes or text): ReproError naming `label` and `what` it should hold,
    where it is not or would take more memory parsed than PARSED_LIMIT."""
    if parsed_size(data) > PARSED_LIMIT:
        raise ReproError(f"{label}: holds more values than {PARSED_LIMIT >> 20} MiB of memory holds parsed "
                         f"(expected {what})")
    try:
        return json.loads(data, parse_constant=_no_constant, object_pairs_hook=unique_keys)
    except RecursionError:
        raise ReproError(f"{label}: nested too deeply (expected {what})") from None
    except MemoryError:
        raise ReproError(f"{label}: too large to parse in the memory available (expected {what})") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # JSON, but a number past Python's limit on digits
            raise ReproError(f"{label}: holds a whole number of more than {sys.get_int_max_str_digits()} digits "
                             f"(expected {what})") from None
        detail = f"{exc}; " if "JSON holds" in str(exc) or "appears twice" in str(exc) else ""
        raise ReproError(f"{label}: not JSON ({detail}expected {what})") from None


def sha256_file(path, limit=None):
    """The file's SHA-256; with `limit`, ReproError where it holds more bytes than that (a file of
    /proc reports a size of 0 and may hold hundreds of GiB)."""
    digest, read = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            read += len(block)
            if limit is not None and read > limit:
                raise ReproError(f"{path}: holds more than the {limit} bytes its size gives (a file of /proc or "
                                 "/sys?); expected a regular file")
            digest.update(block)
    return digest.hexdigest()


def refuse_overwriting(outputs, inputs):
    """ReproError, naming the flag, when an output would replace one of its inputs: `outputs` are
    (flag, path) pairs, `inputs` paths. The same file is the same inode (os.path.samefile), so a
    hard link, a symlink or another spelling of an input is refused too."""
    inputs = [path for path in inputs if path]
    for flag, output in outputs:
        if not output:
            continue
        try:
            if not os.path.isfile(output):  # not there (a new file) or not a file: it replaces no input
                continue
        except OSError:
            continue
        for path in inputs:
            try:
                same = os.path.samefile(output, path)
            except (OSError, ValueError):
                continue
            if same:
                where = "" if str(path) == str(output) else f" ({path})"
                raise ReproError(f"{flag} {output}: is one of the inputs{where}; writing it would overwrite that input: "
                                 "name another output file")


def refuse_inside(flag, output, directory_flag, directory, what):
    """ReproError, naming both flags, where the output `output` lies inside the input directory
    `directory` (`what` it holds, that the command reads): it would write over, or into, those files."""
    if output and Path(output).resolve().is_relative_to(Path(directory).resolve()):
        raise ReproError(f"{flag} {output}: inside {directory_flag} {directory}, {what}; expected a file elsewhere")


_ENV_VAR = re.compile(r"\$(\w+|\{\w+\})")


def expand_path(value, key="path", source="config"):
    """`~` and `$NAME`/`${NAME}` expanded; an unset variable or an unknown `~user` is an error naming the key."""
    for match in _ENV_VAR.finditer(value):
        name = match.group(1).strip("{}")
        if name not in os.environ:
            raise ReproError(f"{source}: {key}: environment variable ${name} is not set (in {value!r})")
    expanded = os.path.expanduser(os.path.expandvars(value))
    if value.startswith("~") and expanded.startswith("~"):  # expanduser leaves a user it cannot find as written
        user = value.split("/", 1)[0]
        raise ReproError(f"{source}: {key}: {user} names no user's home directory here (in {value!r})")
    return expanded


OWN_DIRECTORY_MARK = ".repro-made"


def check_default_output(path, label, is_ours, what, remedy=None):
    """`path`, the output a command writes where its flag (`label`) is left out, where it is new or
    `is_ours(path)` (what an earlier run wrote); otherwise ReproError naming it and `remedy` (by
    default: name the output with the flag): the file is the user's."""
    if os.path.lexists(path):
        check_output(path, f"{label} {path}")
        try:
            ours = is_ours(path)
        except OSError:
            ours = False
        if not ours:
            raise ReproError(f"{label} {path}: holds a file that is not {what}; "
                             + (remedy or f"name the output with {label.split('/')[0]}"))
    return path


_ATOMIC_TEMPORARY = re.compile(r"\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp")  # atomic_path's: mkstemp's 8 characters
_RUN_STAGE = re.compile(r"\.run\.[0-9]+-[0-9]+\.[a-z0-9_]{8}\.tmp")  # run_mode's staging directory (mkdtemp's)


def _as_written(relative):
    """The output path that `relative` (a path in a directory of a command's outputs) stands for: a
    file in a run's staging directory as the file the stage becomes, an atomic temporary file as
    the file it is renamed to (each still matched against what the command writes)."""
    parts = [part for part in PurePosixPath(relative).parts if not _RUN_STAGE.fullmatch(part)]
    temporary = _ATOMIC_TEMPORARY.fullmatch(parts[-1]) if parts else None
    if temporary:
        parts[-1] = temporary["target"]
    return "/".join(parts)


def check_fresh_directory(path, label, written, holds_ours=None):
    """ReproError, naming `label`, unless `path` is new, an empty directory or one that
    fresh_directory made (marked so) holding only files whose paths in it `written` (a compiled
    pattern) matches, the command's own: anything else may be the user's. `holds_ours(path)`, where
    given, tells by its content whether a file `written` names holds what the command writes there
    (a name alone does not make a file the command's)."""
    path = Path(path)
    if path.is_symlink() or path.exists() and not path.is_dir():
        raise ReproError(f"{label} {path}: is not a directory this command made; expected a new or empty "
                         "directory: remove it or name another")
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not (path / OWN_DIRECTORY_MARK).is_file():
        raise ReproError(f"{label} {path}: holds files this command did not write; expected a new or empty "
                         "directory: remove it or name another")
    for folder, directories, files in os.walk(path):
        below = Path(folder).relative_to(path)
        for name in files + [d for d in directories if (Path(folder) / d).is_symlink()]:
            relative = (below / name).as_posix()
            if relative != OWN_DIRECTORY_MARK and not written.fullmatch(_as_written(relative)):
                raise ReproError(f"{label} {path}: holds {relative}, which this command does not write; it may be "
                                 "yours: move it, or name another directory")
            if (holds_ours and relative != OWN_DIRECTORY_MARK and relative == _as_written(relative)
                    and not _held_by(holds_ours, Path(folder) / name)):
                raise ReproError(f"{label} {path}: holds {relative}, whose content is not what this command writes "
                                 "there; it may be yours: move it, or name another directory")


def _held_by(holds_ours, path):
    try:
        return not path.is_symlink() and holds_ours(path)
    except (OSError, ReproError):
        return False


def fresh_directory(path, label, written, holds_ours=None):
    """`path` made empty for this command's output: an earlier one it made (marked so) is removed,
    a new one made and marked. A directory it did not make, holding anything, or one it made
    holding anything but what it writes (`written`, `holds_ours`), is refused naming `label`
    (check_fresh_directory): it may be the user's, and is never deleted."""
    path = Path(path)
    check_fresh_directory(path, label, written, holds_ours)
    if (path / OWN_DIRECTORY_MARK).is_file():
        shutil.rmtree(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / OWN_DIRECTORY_MARK).touch()
    except OSError as exc:
        raise ReproError(f"{label} {path}: cannot write ({exc.strerror})") from None
    return path


@contextlib.contextmanager
def removed_unless_done(*paths):
    """Yield a list of directories that fresh_directory made for this command (`paths`, and those the
    block adds); remove them where the block ends in an exception (a failure, Ctrl-C, SIGTERM): what
    a cut run wrote is never read as a whole run's."""
    made = list(paths)
    try:
        yield made
    except BaseException:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        raise
