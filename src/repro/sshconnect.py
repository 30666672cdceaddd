"""ssh connections with fabric whose host keys are checked against a known_hosts file.

The ssh backend (repro.backends.ssh) reaches its hosts with them, and so do the tf.data workers
it starts on other hosts (repro.pecan.tfdata.remote). Unknown keys are refused unless
`accept_new_host_keys` is set (then logged).
"""

import logging
from pathlib import Path

from repro.errors import ReproError

log = logging.getLogger(__name__)
# paramiko's transport thread logs, with a traceback, the errors that reach the caller, which names
# them in one line (a host that does not speak ssh: "Error reading SSH protocol banner")
logging.getLogger("paramiko").addHandler(logging.NullHandler())
KNOWN_HOSTS_LIMIT = 16 << 20  # tens of thousands of hosts' keys
KEY_FILE_LIMIT = 1 << 20  # a private key is a few KiB


def _load_known_hosts(client, path, label):
    """The entries of the known_hosts file `path` as the host keys `client` checks against. Read here,
    not with paramiko's load_host_keys: that one makes AutoAddPolicy rewrite the whole file (comments
    dropped, a symlink written through), and its errors on a line it cannot read are tracebacks. Lines
    ssh itself would skip are skipped (a key type or marker this client does not know, bad base64); an
    @revoked line is refused, since this client cannot honour it."""
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey
    from paramiko.ssh_exception import SSHException

    from repro.fsutil import read_bounded

    try:
        text = read_bounded(path, label, "a known_hosts file", KNOWN_HOSTS_LIMIT).decode("utf-8")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ReproError(f"{label}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ReproError(f"{label}: not a text file (expected a known_hosts file)") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith("@revoked"):
            raise ReproError(f"{label}: line {number}: an @revoked key, which this ssh client (paramiko) cannot "
                             "honour; expected a known_hosts file without @revoked lines")
        if not line or line.startswith(("#", "@")):
            continue
        try:
            entry = HostKeyEntry.from_line(line, number)
        except (SSHException, InvalidHostKey, ValueError) as exc:
            log.warning("%s: line %d skipped: %s", label, number, exc)
            continue
        for name in entry.hostnames if entry is not None else ():
            client._host_keys.add(name, entry.key.get_name(), entry.key)


class _AppendNewHostKey:
    """Accept an unknown host's key and append it to known_hosts as one line, as ssh's
    StrictHostKeyChecking=accept-new does: the rest of the file stays as it was."""

    def __init__(self, path):
        self.path = Path(path)

    def missing_host_key(self, client, hostname, key):
        client._host_keys.add(hostname, key.get_name(), key)
        with open(self.path, "ab+") as fh:  # appended: written at the end, whatever is read first
            size = fh.seek(0, 2)
            fh.seek(max(size - 1, 0))
            separator = b"\n" if size and fh.read(1) != b"\n" else b""  # a last line without its newline
            fh.write(separator + f"{hostname} {key.get_name()} {key.get_base64()}\n".encode())


def _check_readable(path, label, what, limit):
    """ReproError naming `label` where `path`, which paramiko reads whole, is no regular file (a FIFO
    would wait forever, /dev/zero fill the memory) or is larger than `limit`; a missing or unreadable
    one is left to paramiko to name."""
    from repro.fsutil import read_bounded

    try:
        read_bounded(path, label, what, limit)
    except OSError:
        pass


def connect(host, ssh):
    """A fabric Connection to `host` that verifies its key against ssh.known_hosts."""
    import paramiko
    from fabric import Connection

    if host.get("key_file"):
        _check_readable(host["key_file"], f"{describe_host(host)}: key_file {host['key_file']}", "a private key file",
                        KEY_FILE_LIMIT)
    connection = Connection(host["address"], user=host["user"], port=host["port"],
                            connect_timeout=ssh["connect_timeout_s"],
                            connect_kwargs={"key_filename": host["key_file"], "look_for_keys": False,
                                            "allow_agent": False})
    client = connection.client
    client._system_host_keys.clear()  # only the configured known_hosts counts
    _load_known_hosts(client, ssh["known_hosts"], f"ssh.known_hosts {ssh['known_hosts']}")  # bounded, before any connection
    if ssh["accept_new_host_keys"]:
        log.warning("accepting new host keys for %s:%s (accept_new_host_keys is set)", host["address"], host["port"])
        client.set_missing_host_key_policy(_AppendNewHostKey(ssh["known_hosts"]))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return connection


def describe_host(host):
    return f"{host['name']} ({host['user']}@{host['address']}:{host['port']})"


def open_checked(host, ssh):
    """Connect, turning every connection failure into a ReproError naming the host."""
    import paramiko

    connection = connect(host, ssh)
    try:
        connection.open()
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise ReproError(
                f"{describe_host(host)}: host key not in {ssh['known_hosts']}; trust it with "
                f"`ssh-keyscan -p {host['port']} {host['address']} >> {ssh['known_hosts']}` after checking its "
                "fingerprint, or set ssh.accept_new_host_keys: true") from None
        raise ReproError(f"{describe_host(host)}: ssh failed: {exc}") from None
    except OSError as exc:
        raise ReproError(f"{describe_host(host)}: unreachable: {exc}") from None
    return connection
