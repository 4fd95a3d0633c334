"""A systemd user unit for `prooflane service`, where the host's user manager can keep one running.

Used only when ``systemctl --user`` answers and the user lingers (``loginctl enable-linger``): without
lingering, the user's manager, and every unit of it, ends with the user's last session, which is the SSH
session a deploy ran in. The unit runs the same supervisor (``prooflane service run``), so the pidfiles,
``stop`` and its checks are the same either way; systemd adds starting it at boot and again if the
supervisor itself dies. Elsewhere the supervisor is a detached process of its own (:mod:`.service`).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import subprocess
from pathlib import Path

__all__ = ["UnitError", "start_unit", "stop_unit", "unit_name", "unit_path", "unit_text", "unusable"]

_SYSTEMCTL_SECS = 60.0


class UnitError(RuntimeError):
    """Raised when ``systemctl --user`` refuses the unit; the message is its last line."""


def unit_name(folder: Path) -> str:
    """``prooflane-<12 hex digits of the folder's path>.service``: one unit per service folder."""
    return f"prooflane-{hashlib.sha256(str(folder).encode()).hexdigest()[:12]}.service"


def unit_path(folder: Path) -> Path:
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "systemd" / "user" / unit_name(folder)


def _quoted(word: str) -> str:
    """A word of an ExecStart line: in double quotes, with systemd's specifiers (%) and escapes doubled."""
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped}"'


def unit_text(folder: Path, command: list[str], grace: float) -> str:
    """The unit: ``command`` (the supervisor) in ``folder``, restarted if it fails, given ``grace`` and 15 s
    more to stop; its output appended to the folder's ``service.log``."""
    log = str(folder / "service.log").replace("%", "%%")
    return (
        "[Unit]\n"
        f"Description=prooflane daemon in {str(folder).replace('%', '%%')}\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"WorkingDirectory={_quoted(str(folder))}\n"
        f"ExecStart={' '.join(_quoted(w) for w in command)}\n"
        "Restart=on-failure\nRestartSec=2\nKillMode=mixed\n"
        f"TimeoutStopSec={int(grace) + 15}\n"
        f"StandardOutput=append:{log}\nStandardError=append:{log}\n\n"
        "[Install]\nWantedBy=default.target\n"
    )


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True,
                              timeout=_SYSTEMCTL_SECS, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(args, 1, "", str(exc))


def unusable() -> str | None:
    """None when a user unit would outlive the SSH session; else why not (for the ``started:`` line)."""
    if _systemctl("show-environment").returncode != 0:
        return "no systemd user manager"
    try:
        asked = ["loginctl", "show-user", getpass.getuser(), "--property=Linger", "--value"]
        linger = subprocess.run(asked, capture_output=True, text=True, timeout=_SYSTEMCTL_SECS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "loginctl cannot say whether the user lingers"
    if linger.stdout.strip() != "yes":
        return "the user does not linger (loginctl enable-linger)"
    return None


def _checked(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise UnitError(f"systemctl --user {what}: {said[-1] if said else f'exit {done.returncode}'}")


def start_unit(folder: Path, command: list[str], grace: float) -> str:
    """Write the folder's unit, enable it (started at boot) and start it; its name."""
    path = unit_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(unit_text(folder, command, grace))
    _checked(_systemctl("daemon-reload"), "daemon-reload")
    name = unit_name(folder)
    _checked(_systemctl("enable", name), f"enable {name}")
    _checked(_systemctl("restart", name), f"restart {name}")
    return name


def stop_unit(folder: Path) -> bool:
    """Stop and disable the folder's unit if it has one (so it does not start at boot); whether it had."""
    if not unit_path(folder).exists():
        return False
    _systemctl("disable", "--now", unit_name(folder))  # what is left is then found and named by stop
    return True
