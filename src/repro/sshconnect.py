"""ssh connections with fabric whose host keys are checked against a known_hosts file.

The ssh backend (repro.backends.ssh) reaches its hosts with them, and so do the tf.data workers
it starts on other hosts (repro.pecan.tfdata.remote). Unknown keys are refused unless
`accept_new_host_keys` is set (then logged).
"""

import logging
from pathlib import Path

from repro.errors import ReproError

log = logging.getLogger(__name__)
KNOWN_HOSTS_LIMIT = 16 << 20  # tens of thousands of hosts' keys
KEY_FILE_LIMIT = 1 << 20  # a private key is a few KiB


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

    _check_readable(ssh["known_hosts"], f"ssh.known_hosts {ssh['known_hosts']}", "a known_hosts file",
                    KNOWN_HOSTS_LIMIT)
    if host.get("key_file"):
        _check_readable(host["key_file"], f"{describe_host(host)}: key_file {host['key_file']}", "a private key file",
                        KEY_FILE_LIMIT)
    connection = Connection(host["address"], user=host["user"], port=host["port"],
                            connect_timeout=ssh["connect_timeout_s"],
                            connect_kwargs={"key_filename": host["key_file"], "look_for_keys": False,
                                            "allow_agent": False})
    client = connection.client
    client._system_host_keys.clear()  # only the configured known_hosts counts
    client.load_host_keys(ssh["known_hosts"]) if Path(ssh["known_hosts"]).exists() else None
    if ssh["accept_new_host_keys"]:
        log.warning("accepting new host keys for %s:%s (accept_new_host_keys is set)", host["address"], host["port"])
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
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
