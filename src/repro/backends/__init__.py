"""Where runs execute: this machine (`local`) or hosts reached over ssh (`ssh`)."""

import time

from repro.errors import ReproError
from repro.fsutil import write_json
from repro.workflow import settings_digest

BACKENDS = ("local", "ssh")


def get_backend(name):
    """The backend module: start(settings, state_path), status(state, calibrations), execute(...), stop(state)."""
    if name == "local":
        from repro.backends import local

        return local
    if name == "ssh":
        from repro.backends import ssh

        return ssh
    raise ReproError(f"unknown backend {name!r}; expected one of {list(BACKENDS)}")


def start_cluster(settings, state_path):
    """Start the backend `settings` name (the `cluster_settings` of the effective config) and write
    its state, which records the settings' digest so that later status checks can compare."""
    state = get_backend(settings["backend"]).start(settings, state_path)
    state.update(backend=settings["backend"], settings_digest=settings_digest(settings), started_at=time.time())
    write_json(state_path, state)
    return state


def state_check(state, state_path, expected_digest):
    """A status check: the cluster state was written for the settings the configuration gives now."""
    ok = state.get("settings_digest") == expected_digest
    return {"name": f"cluster state {state_path} matches the configuration", "ok": ok,
            "detail": "" if ok else (
                f"it was started for other settings (backend {state.get('backend')!r}, digest "
                f"{state.get('settings_digest')}; the configuration now gives {expected_digest}); restart it with "
                "`snakemake cluster_start --forcerun cluster_start` (with the same --configfile/--config options), "
                "then run again")}


def format_checks(checks):
    """The artifact's manage_cluster.sh status lines: '[ OK ] check' or '[FAILED] check: detail'."""
    lines = []
    for check in checks:
        if check["ok"]:
            lines.append(f"[ OK ] {check['name']}")
        else:
            lines.append(f"[FAILED] {check['name']}: {check['detail']}")
    return "\n".join(lines)
