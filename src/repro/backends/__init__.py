"""Where runs execute: this machine (`local`) or hosts reached over ssh (`ssh`)."""

from repro.errors import ReproError


BACKENDS = ("local", "ssh")


def get_backend(name):
    """The backend module: start(config, state_path), status(state, calibrations), execute(...), stop(state)."""
    if name == "local":
        from repro.backends import local

        return local
    if name == "ssh":
        from repro.backends import ssh

        return ssh
    raise ReproError(f"unknown backend {name!r}; expected one of {list(BACKENDS)}")


def format_checks(checks):
    """The artifact's manage_cluster.sh status lines: '[ OK ] check' or '[FAILED] check: detail'."""
    lines = []
    for check in checks:
        if check["ok"]:
            lines.append(f"[ OK ] {check['name']}")
        else:
            lines.append(f"[FAILED] {check['name']}: {check['detail']}")
    return "\n".join(lines)
