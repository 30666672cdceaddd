"""Where runs execute. Each backend offers start(config) -> state, status(state) -> checks, stop(state)."""

from repro.errors import ReproError


def get_backend(name):
    if name == "local":
        from repro.backends import local

        return local
    raise ReproError(f"unknown backend {name!r}; expected one of ['local']")


def format_checks(checks):
    """The artifact's manage_cluster.sh status lines: '[ OK ] check' or '[FAILED] check: detail'."""
    lines = []
    for check in checks:
        if check["ok"]:
            lines.append(f"[ OK ] {check['name']}")
        else:
            lines.append(f"[FAILED] {check['name']}: {check['detail']}")
    return "\n".join(lines)
