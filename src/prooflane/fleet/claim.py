"""The fleet's claim on a folder it deployed: what lets it run anything there again.

A deploy ends by writing :data:`CLAIM_FILE` (0600) into the daemon's folder, holding a random id (:func:`new`)
that the fleet keeps in its own config beside the folder (``deploy_claim``; ``deploy_dir`` and it are written
by a deploy alone: ``POST /fleet/daemons`` refuses both). Every later command the fleet runs in that folder
(``service stop`` and ``restart``, reading its log) is :func:`guarded`: one shell line that checks, then
runs, so nothing can change between the check and the run:

1. the claim: the folder holds :data:`CLAIM_FILE`, a plain file (not a link) whose content is the fleet's
   id. The id is sent on the command's standard input, never on its command line, which other users of the
   host can read (``ps``);
2. the folder is safe to run from: nothing in it (the folder itself, ``venv`` and everything in it, its
   config; not the contents of ``data`` and ``wheels``, which are never run) is owned by another user than
   the SSH user or root, or writable by every user. A group that may write is trusted (Ubuntu gives each user
   a group of their own and a umask of 002).

A deploy runs the folder's programs (pip, ``service start``, the earlier daemon's ``service stop``) with the
second check only: it is about to claim the folder, and a ``deploy`` token may install anything anyway.

A check that fails prints one line starting :data:`REFUSED` on standard error and exits with
:data:`REFUSED_EXIT`, having run nothing; :func:`refusal` reads it back.
"""

from __future__ import annotations

import secrets
import shlex

from .ssh import RemoteResult

__all__ = ["CLAIM_FILE", "REFUSED", "REFUSED_EXIT", "FolderRefused", "guarded", "new", "refusal"]

CLAIM_FILE = ".prooflane-claim"
REFUSED = "prooflane-fleet-refused:"
REFUSED_EXIT = 78  # EX_CONFIG; with the line above, never read from the program's own exit
_UNCLAIMED = "unclaimed"
_UNSAFE = "unsafe"
# The first path in the folder owned by another user than the SSH user or root, or writable by every user
# (links are skipped: their own modes mean nothing; what they point to is checked where it lies inside).
_FIND_UNSAFE = (
    "find . \\( -path './data/*' -o -path './wheels/*' \\) -prune -o ! -type l "
    '\\( ! -user "$(id -u)" ! -user 0 -o -perm -0002 \\) -print 2>&1 | head -n 1'
)


class FolderRefused(Exception):
    """Raised when the fleet would run something in a daemon's folder that does not hold its claim, or that
    another user may write; nothing was run there."""


def new() -> str:
    """A fresh claim id: 32 hex digits."""
    return secrets.token_hex(16)


def guarded(folder: str, command: str, claim: str | None) -> tuple[str, bytes]:
    """``command`` run in ``folder`` only after the checks (the claim's only when ``claim`` is given); the
    line for the host's shell and the standard input to send with it."""
    checks = [f"cd {shlex.quote(folder)}"]
    if claim is not None:
        file = shlex.quote(CLAIM_FILE)
        checks.append(
            f'{{ IFS= read -r want && [ -f {file} ] && [ ! -h {file} ] && [ "$(cat {file})" = "$want" ] '
            f"|| {{ echo '{REFUSED} {_UNCLAIMED}' >&2; exit {REFUSED_EXIT}; }}; }}"
        )
    checks.append(
        f'{{ bad=$({_FIND_UNSAFE}); [ -z "$bad" ] '
        f'|| {{ echo "{REFUSED} {_UNSAFE} $bad" >&2; exit {REFUSED_EXIT}; }}; }}'
    )
    return " && ".join([*checks, command]), (f"{claim}\n".encode() if claim is not None else b"")


def refusal(result: RemoteResult, *, name: str, host: str, folder: str) -> str | None:
    """Why the checks of :func:`guarded` refused to run anything (one line for a person), or None when they
    passed (whatever the command then did)."""
    if result.code != REFUSED_EXIT:
        return None
    said = next((line for line in result.err.splitlines() if line.startswith(REFUSED)), None)
    if said is None:
        return None
    what, _, found = said.removeprefix(REFUSED).strip().partition(" ")
    if what == _UNCLAIMED:
        return (f"{name}: the folder {folder} on {host} does not hold the fleet's claim ({CLAIM_FILE} "
                f"with the id its deploy wrote): nothing was run there; deploy {name!r} again to claim "
                "it")  # fmt: skip
    if found.startswith("."):  # a path, else what find said (a folder it could not read)
        found = f"{found.removeprefix('./')} is owned by another user or writable by every user"
    return (f"{name}: the folder {folder} on {host} is not the SSH user's alone ({found}): nothing was run "
            "there; make it the SSH user's and not world-writable (chmod o-w), or deploy into a folder of "
            "the SSH user's own")  # fmt: skip
