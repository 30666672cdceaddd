"""What a Snakemake profile needs before Snakemake starts with it: the plugins it names (the
package's extras), keys that are Snakemake's options, the environment variables its values name, the
programs its executor runs on this machine (SLURM's client commands, a generic cluster's submit,
status, cancel and sidecar commands), and credentials where it uses Google's services.

Snakemake creates its default storage's client before it reads the Snakefile, so with
`default-storage-provider: gcs` and no credentials it ends in google-auth's DefaultCredentialsError
traceback before the workflow can check anything; `repro doctor --profile DIR` names what is
missing in one line each instead.
"""

import difflib
import importlib.util
import os
import re
import shlex
import shutil
from pathlib import Path


from repro.errors import ReproError, one_line
from repro.fsutil import file_kind

# the executors and storage providers of pyproject.toml's extras: (kind, name) -> extra
PLUGIN_EXTRAS = {
    ("executor", "googlebatch"): "googlebatch",
    ("executor", "slurm"): "slurm",
    ("executor", "cluster-generic"): "slurm",
    ("storage", "gcs"): "gcs",
}
BUILTIN_EXECUTORS = {"local", "dryrun", "touch"}
GOOGLE_PLUGINS = {("executor", "googlebatch"), ("storage", "gcs")}
# as os.path.expandvars, which Snakemake applies to a profile's values, finds them
_ENV_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")
NO_CREDENTIALS = ("no Google credentials: application default credentials not found (run `gcloud auth "
                  "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file; on Google Cloud "
                  "they come from the metadata server); for tests against gcp-storage-emulator set STORAGE_EMULATOR_HOST")


def profile_file(directory):
    """The profile's config file, as Snakemake 9 picks it (config.v8+.yaml before config.yaml)."""
    directory = Path(directory)
    for name in ("config.v8+.yaml", "config.yaml"):
        if (directory / name).is_file():
            return directory / name
    for name in ("config.v8+.yaml", "config.yaml"):  # there, but not a file to read
        if (directory / name).exists():
            kind = file_kind((directory / name).stat().st_mode)
            raise ReproError(f"{directory / name}: {kind}; expected the Snakemake profile's config file")
    raise ReproError(f"{directory}: not a Snakemake profile (expected a directory with config.yaml)")


def read_profile(directory):
    from repro.yamlfile import read_yaml_file

    path = profile_file(directory)
    try:
        profile = read_yaml_file(path, "a Snakemake profile's config")
    except OSError as exc:
        raise ReproError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(profile, dict):
        raise ReproError(f"{path}: expected a mapping of Snakemake options")
    return path, profile


_PLUGIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")  # as a plugin's package name ends


def plugins(profile, path="profile"):
    """(kind, name, option) for the executor and default storage the profile names; ReproError naming
    the option where its value cannot name a plugin."""
    found = []
    for kind, option in (("executor", "executor"), ("storage", "default-storage-provider")):
        name = profile.get(option)
        if name is None or name == "":
            continue
        if not isinstance(name, str) or not _PLUGIN_NAME.fullmatch(name):
            raise ReproError(f"{path}: {option}: expected a plugin name (letters, digits, - and _), got {str(name)[:100]!r}")
        if not (kind == "executor" and name in BUILTIN_EXECUTORS):
            found.append((kind, name, option))
    return found


def missing_plugins(path, profile):
    problems = []
    for kind, name, option in plugins(profile, path):
        if not _installed(kind, name):
            extra = PLUGIN_EXTRAS.get((kind, name))
            how = (f"the '{extra}' extra (pip install -e '.[{extra}]')" if extra
                   else f"snakemake-{kind}-plugin-{name} (pip install snakemake-{kind}-plugin-{name})")
            problems.append(f"{path}: {option}: {name} needs {how}")
    return problems


def unknown_options(path, profile):
    """One problem per key of the profile that is no option of this Snakemake and its installed
    plugins: Snakemake refuses the profile for it ("unrecognized arguments: --corez=2"), naming
    neither the file nor the key. As Snakemake reads a profile, a key without a value is skipped and
    a unique beginning of the name of an option that takes a value stands for it. Keys of a plugin
    that is not installed are left to missing_plugins."""
    if importlib.util.find_spec("snakemake") is None:  # the profile's options cannot be known
        return []
    missing = tuple(f"{name}-" if kind == "executor" else f"storage-{name}-" for kind, name, _ in plugins(profile, path)
                    if not _installed(kind, name))
    try:
        options = _snakemake_options()
    except Exception as exc:  # a plugin that fails to load: Snakemake would not start either
        if missing:  # the profile's own plugin, half installed: missing_plugins names it
            return []
        return [f"{path}: Snakemake cannot list its options ({one_line(f'{type(exc).__name__}: {exc}')[:300]}); "
                "it would not start with this installation"]
    known = [option for option in options if option.startswith("--")]
    problems = []
    for key, value in profile.items():
        option = f"--{key}"
        begun = [k for k in known if k.startswith(option)]
        # a flag's abbreviation fails ("--printshell=True": Snakemake passes the value of a key it does not know)
        taken = len(begun) == 1 and options[begun[0]].nargs != 0
        if value is None or option in known or taken or (isinstance(key, str) and key.startswith(missing)):
            continue
        short = options.get(f"-{key}")
        if short:  # a short option's letter: its long name
            close = [o for o in short.option_strings if o.startswith("--")]
        elif len(begun) == 1:  # a flag's abbreviation
            close = begun
        else:
            close = difflib.get_close_matches(option.replace("_", "-"), known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0][2:]}?" if close else ""
        problems.append(f"{path}: {str(key)[:100]}: not an option of Snakemake or of its installed plugins{hint}")
    return problems


def _snakemake_options():
    """{option string: argparse action} of Snakemake's command line with the installed plugins' options."""
    path_before = os.environ.get("PATH")
    # Snakemake's import looks for bash, then sh, on PATH to run its shell commands, and warns where neither is
    os.environ["PATH"] = os.pathsep.join(filter(None, [path_before, os.defpath]))
    try:
        from snakemake.cli import get_argument_parser

        return get_argument_parser()._option_string_actions
    finally:
        if path_before is None:
            del os.environ["PATH"]
        else:
            os.environ["PATH"] = path_before


def _installed(kind, name):
    try:
        return importlib.util.find_spec(f"snakemake_{kind}_plugin_{name.replace('-', '_')}") is not None
    except ModuleNotFoundError:
        return False


_VARIABLE_NAME = re.compile(r"\w+", re.ASCII)  # as Snakemake's register_envvars takes them


def passed_variables(profile, path="profile"):
    """The environment variables the profile's `envvars` passes to the jobs (one name, or a list of
    them); ReproError naming the key where it is neither (Snakemake read a number as a name)."""
    value = profile.get("envvars")
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) and _VARIABLE_NAME.fullmatch(name) for name in names):
        raise ReproError(f"{path}: envvars: expected a list of environment variable names (letters, digits and _), "
                         f"got {str(value)[:100]!r}")
    return names


def unset_variables(path, profile, environ=os.environ):
    """One problem per environment variable that the profile's values name, or its envvars passes to
    the jobs, and that is not set (Snakemake refuses to start without those)."""
    unset = {name: ["envvars"] for name in passed_variables(profile, path) if name not in environ}

    def walk(value, key):
        if isinstance(value, dict):
            for child, item in value.items():
                walk(item, f"{key}.{child}" if key else str(child))
        elif isinstance(value, list):
            for item in value:
                walk(item, key)
        elif isinstance(value, str):
            for match in _ENV_VAR.finditer(value):
                name = match.group(1) or match.group(2)
                if name not in environ:
                    unset.setdefault(name, []).append(key)

    walk(profile, "")
    return [f"{path}: environment variable ${name} is not set (used by {', '.join(keys)})" for name, keys in unset.items()]


# The SLURM plugin submits with sbatch, cancels with scancel and asks for each job's state with sacct or
# squeue (its slurm-status-command picks one; it falls back to the other where that one is missing):
# each found on PATH by name.
SLURM_PROGRAMS = (("sbatch", "to submit each job"), ("scancel", "to cancel jobs"))
SLURM_STATUS = ("sacct", "squeue")
# cluster-generic runs its submit and status commands through the shell, its cancel and sidecar commands
# as one program each (the whole value, no arguments); without a submit command it does not start
SHELL_COMMANDS = {"cluster-generic-submit-cmd": "to submit each job", "cluster-generic-status-cmd": "for each job's state"}
PROGRAM_COMMANDS = {"cluster-generic-cancel-cmd": "to cancel jobs", "cluster-generic-sidecar-cmd": "beside the workflow"}
# a command line whose program these hide (a compound command, a substitution, a format placeholder)
# is the shell's to resolve: not judged here
_SHELL_SYNTAX = re.compile(r"[;&|`<>(){}\n]|\$\(")
_SHELL_WORDS = {"!", ".", "cd", "command", "eval", "exec", "if", "for", "while", "until", "case", "time", "source"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _resolved(value, profile_dir, environ):
    """A profile's value as Snakemake passes it on (snakemake/profiles.py): environment variables and
    ~ expanded, and made a path into the profile's directory where a file there has that name."""
    value = os.path.expanduser(_ENV_VAR.sub(lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), str(value)))
    return str(profile_dir / value) if value and (profile_dir / value).exists() else value


def _unrunnable(program, environ):
    """Why `program` would not run as an executor runs it (a path, relative to the directory Snakemake
    runs in, to an executable file, or a name found on PATH); None where it would."""
    shown = repr(program[:100] + ("..." if len(program) > 100 else ""))
    if os.sep not in program:
        found = shutil.which(program, path=environ.get("PATH", os.defpath)) if program else None
        return None if found else f"{shown} not found on PATH"
    if not os.path.isfile(program):
        where = os.path.abspath(program)
        return f"{shown}: no such file" + (f" ({where[:200]})" if where != program else "")
    return None if os.access(program, os.X_OK) else f"{shown}: not executable"


def _shell_program(path, option, command, profile_dir, environ):
    """The program that the shell runs for the profile's command line `command` (after NAME=value
    words), or None where the shell itself resolves it (a compound command, a builtin, a variable
    still unset, which unset_variables names); ReproError naming `option` where it is no command line."""
    if not isinstance(command, str):
        raise ReproError(f"{path}: {option}: expected a command line, got {str(command)[:100]!r}")
    line = _resolved(command, profile_dir, environ)
    try:
        words = shlex.split(line)
    except ValueError as exc:  # an unclosed quote
        raise ReproError(f"{path}: {option}: {exc} in {command[:100]!r}") from None
    while words and _ASSIGNMENT.match(words[0]):  # NAME=value before the program
        words.pop(0)
    if not words:
        raise ReproError(f"{path}: {option}: expected a command line, got {command[:100]!r}")
    if _SHELL_SYNTAX.search(line) or words[0] in _SHELL_WORDS or _ENV_VAR.search(line):
        return None
    return words[0]


def missing_programs(path, profile, environ=os.environ):
    """One problem per program the profile's executor runs on this machine that is not there (SLURM's
    client commands; a generic cluster's commands), or per command it needs and is not given."""
    executor, profile_dir = profile.get("executor"), Path(path).parent
    problems = []

    def check(option, programs, why):
        reasons = [_unrunnable(program, environ) for program in programs]
        if all(reasons):
            problems.append(f"{path}: {option}: {' and '.join(reasons)}; {executor} runs "
                            f"{'one of them' if len(programs) > 1 else 'it'} {why}")

    if executor == "slurm":
        for program, why in SLURM_PROGRAMS:
            check("executor", [program], why)
        check("executor", SLURM_STATUS, "for each job's state")
        status = profile.get("slurm-status-command")
        if status is not None and status not in SLURM_STATUS:
            problems.append(f"{path}: slurm-status-command: expected sacct or squeue, got {str(status)[:100]!r}")
    elif executor == "cluster-generic":
        if profile.get("cluster-generic-submit-cmd") is None:
            problems.append(f"{path}: cluster-generic-submit-cmd: not set; the cluster-generic executor needs the "
                            "command that submits a job")
        for option, why in SHELL_COMMANDS.items():
            command = profile.get(option)
            if command is None or (command == "" and option != "cluster-generic-submit-cmd"):
                continue  # not given (the plugin takes an empty status command as none)
            program = _shell_program(path, option, command, profile_dir, environ)
            if program is not None:
                check(option, [program], why)
        for option, why in PROGRAM_COMMANDS.items():
            command = profile.get(option)
            program = None if command is None or command == "" else _resolved(command, profile_dir, environ)
            if program and not _ENV_VAR.search(program):
                arguments = any(char.isspace() for char in program)
                check(option, [program], why + (" (the whole value, as one program: no arguments)" if arguments else ""))
    return problems


def missing_credentials(environ=os.environ):
    """None where Google's client libraries will find credentials (or an emulator stands in for
    the bucket), else the one-line reason."""
    if environ.get("STORAGE_EMULATOR_HOST"):
        return None
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ModuleNotFoundError:  # the plugin is missing too, and named
        return None
    from repro.tracestore import check_credentials_file

    try:
        check_credentials_file(environ)
    except ReproError as exc:
        return str(exc)
    try:
        google.auth.default()
    except DefaultCredentialsError as exc:
        if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            return f"GOOGLE_APPLICATION_CREDENTIALS: {' '.join(str(exc).split())}"
        return NO_CREDENTIALS
    return None


def check_profile(directory):
    """Every problem found, one line each (empty: the profile can start), and a summary of it."""
    path, profile = read_profile(directory)
    used = {(kind, name) for kind, name, _ in plugins(profile, path)}  # first: a value naming no plugin is the one problem
    problems = (missing_plugins(path, profile) + unknown_options(path, profile) + unset_variables(path, profile)
                + missing_programs(path, profile))
    if used & GOOGLE_PLUGINS:
        missing = missing_credentials()
        if missing:
            problems.append(f"{path}: {missing}")
    names = [f"{kind} {name}" for kind, name, _ in plugins(profile)] or ["local execution"]
    summary = f"{path}: ok ({', '.join(names)})"
    if used & GOOGLE_PLUGINS and os.environ.get("STORAGE_EMULATOR_HOST"):
        summary += (f"; storage goes to the emulator at {os.environ['STORAGE_EMULATOR_HOST']}, credentials not checked "
                    "(a dry-run only: Batch jobs cannot reach it)")
    return problems, summary
