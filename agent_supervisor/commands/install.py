"""``supervisor install --policy P [--root DIR]`` and ``supervisor uninstall``: run the
policy as a systemd service.

``install``, in order (each step idempotent; ``--root`` writes every file under DIR and
skips what would change the running system, saying so on one line each):

1. the service user (``useradd --system``; default ``agent-supervisor``), unless it exists;
2. the state directory (the policy's; ``/var/lib/agent-supervisor/<fleet>`` for a policy
   in /etc), mode 0700, owned by the user; the unit names it ``StateDirectory=``;
3. the admin token: a new random one (``secrets.token_urlsafe(32)``) unless one exists,
   never printed: into the policy's ``admin.token_file`` when it sets one (0600, owned
   by the user), else into ``/etc/agent-supervisor/<fleet>.env`` as
   ``<admin.token_env>=...`` (0600, root; the unit's ``EnvironmentFile=``);
4. the unit ``/etc/systemd/system/agent-supervisor-<fleet>.service`` (act/systemd.py's
   ``unit_file``), 0644;
5. ``systemctl daemon-reload`` and ``systemctl enable --now`` (``--no-start``: enable only).

``uninstall`` stops and disables the unit and removes the unit and the token env file; the
state directory (database, engine logs) and the user stay unless ``--purge``.

Exit status: 0 done; 1 a step failed (the message names it); 2 a bad policy.
"""

from __future__ import annotations

import argparse
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agent_supervisor.act.systemd import DEFAULT_USER, unit_file
from agent_supervisor.errors import SetupError
from agent_supervisor.policy.load import load_policy, load_policy_file, with_state_default
from agent_supervisor.policy.model import Policy

__all__ = ["add_parsers", "run"]



def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``install`` and ``uninstall`` to the ``supervisor`` parser."""
    for name, text in (("install", "install the policy as a systemd service: user, state "
                        "directory, admin token, unit; enable and start it"),
                       ("uninstall", "stop, disable and remove the service (the state "
                        "directory and the user stay unless --purge)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--policy", required=True, type=Path,
                       help="the policy file the service runs (kept where it is; /etc is "
                       "the usual place)")
        p.add_argument("--root", type=Path, help="write every file under this directory "
                       "and skip useradd and systemctl (default: / , the real system)")
        p.add_argument("--user", default=DEFAULT_USER,
                       help=f"the service's user (default: {DEFAULT_USER})")
        p.add_argument("--unit-name", help="the unit's name (default: "
                       "agent-supervisor-<fleet>)")
        if name == "install":
            p.add_argument("--executable", type=Path, help="the `supervisor` program the "
                           "unit runs (default: the one beside this Python, else on $PATH)")
            p.add_argument("--no-start", action="store_true", help="enable the unit but do "
                           "not start it now (default: enable --now)")
        else:
            p.add_argument("--purge", action="store_true", help="also delete the state "
                           "directory (database, engine logs) and the user (default: keep)")


@dataclass
class Layout:
    """Where install puts things, on the real system (``real``) and on disk (``disk``)."""

    root: Path | None
    unit_name: str
    unit: Path
    state: Path
    token_file: Path | None
    """The policy's admin.token_file, or None (then the env file holds the token)."""
    env_file: Path

    def disk(self, path: Path) -> Path:
        return path if self.root is None else self.root / path.relative_to("/")


def layout(policy: Policy, args: argparse.Namespace) -> Layout:
    name = args.unit_name or f"agent-supervisor-{policy.fleet}"
    token = policy.resolve(policy.admin.token_file) if policy.admin.token_file else None
    return Layout(root=args.root.resolve() if args.root else None, unit_name=name,
                  unit=Path("/etc/systemd/system") / f"{name}.service",
                  state=policy.state_directory, token_file=token,
                  env_file=Path("/etc/agent-supervisor") / f"{policy.fleet}.env")


def _say(text: str) -> None:
    print(text, flush=True)


def _run(argv: list[str]) -> None:
    """Run a system command; SetupError naming it when it fails."""
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
    except FileNotFoundError as exc:
        raise SetupError(f"{argv[0]}: not found on this system") from exc
    except subprocess.CalledProcessError as exc:
        raise SetupError(f"{' '.join(argv)} failed ({exc.returncode}): "
                         f"{(exc.stderr or exc.stdout).strip()[:400]}") from exc


def _system(lay: Layout, argv: list[str]) -> None:
    if lay.root is not None:
        _say(f"skipped (--root): {' '.join(argv)}")
    else:
        _run(argv)
        _say(f"ran: {' '.join(argv)}")


def _write(path: Path, text: str, mode: int, owner: str | None = None) -> None:
    """Write ``text`` with ``mode`` from the start (created 0600, then chmod)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    if owner is not None:
        shutil.chown(path, owner, owner)


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def executable(given: Path | None) -> str:
    """The ``supervisor`` program for ExecStart=: ``given``, else the console script of
    this Python's environment (a venv's ``bin/``; pipx's and ``uv tool``'s own venv, not
    the link they put on $PATH, which an upgrade may move), else the one on $PATH.
    SetupError when there is none."""
    if given is not None:
        return str(given.absolute())
    beside = Path(sys.executable).parent / "supervisor"
    if beside.exists():
        return str(beside)
    found = shutil.which("supervisor")
    if found is None:
        raise SetupError("no `supervisor` program beside this Python or on $PATH: install "
                         "the package into a virtual environment, or pass --executable")
    return found


def _closed_to_others(path: Path) -> Path | None:
    """The first directory above ``path`` that other users cannot enter (no o+x), or None.
    Ubuntu makes home directories 0750, and pipx and ``uv tool`` install under one."""
    for parent in reversed(path.parents):
        try:
            if not parent.stat().st_mode & 0o001:
                return parent
        except OSError:
            return parent
    return None


def _interpreter(program: str) -> Path | None:
    """The Python a console script's ``#!`` line names (resolved), or None."""
    try:
        with open(program, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return Path(words[0]).resolve() if words else None


def unit_executable(args: argparse.Namespace) -> str:
    """``executable(args.executable)``, with a warning when the service user could not run
    it: the program or its Python sits below a directory closed to other users (then
    systemd fails the start with status 203/EXEC)."""
    exe = executable(args.executable)
    if args.user == "root":
        return exe
    for path in (Path(exe).resolve(), _interpreter(exe)):
        closed = path and _closed_to_others(path)
        if closed:
            _say(f"warning: {closed} is closed to other users, so the service user "
                 f"{args.user} cannot run {path}; install the package where every user can "
                 "read it (README.md, \"Install on a Spark\") or pass --executable")
            break
    return exe


def install(policy: Policy, policy_path: Path, args: argparse.Namespace) -> int:
    lay = layout(policy, args)
    owner = args.user if lay.root is None and os.geteuid() == 0 else None
    if state_under_etc(lay.state):
        raise SetupError(f"{policy_path}: the state directory {lay.state} is under /etc; "
                         "leave storage.state_directory unset (/var/lib/agent-supervisor/"
                         f"{policy.fleet}) or set it under /var/lib")
    # 1. the user
    if lay.root is None and _user_exists(args.user):
        _say(f"user {args.user}: exists")
    else:
        _system(lay, ["useradd", "--system", "--home-dir", str(lay.state), "--no-create-home",
                      "--shell", "/usr/sbin/nologin", args.user])
    # 2. the state directory
    state = lay.disk(lay.state)
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state, 0o700)
    if owner is not None:
        shutil.chown(state, owner, owner)
    _say(f"state directory: {lay.state} (0700)")
    # 3. the token
    env_file = None
    if lay.token_file is not None:
        if lay.disk(lay.token_file).exists():
            _say(f"admin token: {lay.token_file} exists, kept")
        else:
            _write(lay.disk(lay.token_file), secrets.token_urlsafe(32) + "\n", 0o600, owner)
            _say(f"admin token: written to {lay.token_file} (0600)")
    else:
        env_file = str(lay.env_file)
        if lay.disk(lay.env_file).exists():
            _say(f"admin token: {lay.env_file} exists, kept")
        else:
            _write(lay.disk(lay.env_file),
                   f"{policy.admin.token_env}={secrets.token_urlsafe(32)}\n", 0o600)
            _say(f"admin token: written to {lay.env_file} as {policy.admin.token_env} (0600)")
    # 4. the unit
    exe = unit_executable(args)
    unit = unit_file(policy, policy_path, executable=exe, user=args.user)
    if env_file is not None:       # the admin token, read by systemd itself (root, 0600)
        unit = unit.replace("[Service]\n", f"[Service]\nEnvironmentFile={env_file}\n", 1)
    _write(lay.disk(lay.unit), unit, 0o644)
    _say(f"unit: {lay.unit}")
    # 5. enable
    _system(lay, ["systemctl", "daemon-reload"])
    _system(lay, ["systemctl", "enable", *([] if args.no_start else ["--now"]),
                  lay.unit_name])
    token_hint = lay.token_file or lay.env_file
    _say(f"done: `systemctl status {lay.unit_name}`; levers: `sudo supervisor status "
         f"--policy {policy_path} --token-file {token_hint}`")
    return 0


def uninstall(policy: Policy, args: argparse.Namespace) -> int:
    lay = layout(policy, args)
    if lay.root is not None or lay.disk(lay.unit).exists():
        _system(lay, ["systemctl", "disable", "--now", lay.unit_name])
    for path in (lay.unit, lay.env_file):
        if lay.disk(path).exists():
            lay.disk(path).unlink()
            _say(f"removed {path}")
    _system(lay, ["systemctl", "daemon-reload"])
    if args.purge:
        shutil.rmtree(lay.disk(lay.state), ignore_errors=True)
        _say(f"removed {lay.state}")
        if lay.root is not None or _user_exists(args.user):
            _system(lay, ["userdel", args.user])
    else:
        _say(f"kept: {lay.state} (database, engine logs) and user {args.user} (--purge "
             "removes them)")
    return 0


def state_under_etc(path: Path) -> bool:
    return path.is_relative_to("/etc")


def run(args: argparse.Namespace) -> int:
    """``install`` or ``uninstall``. Raises PolicyError (exit 2) and SetupError (exit 1)."""
    path = args.policy.resolve()
    real = path
    if args.root is not None and path.is_relative_to(args.root.resolve()):
        real = Path("/") / path.relative_to(args.root.resolve())
    policy = load_policy_file(path, environ={})
    if real != path:
        # The policy as the service will see it: relative paths and the state default
        # (a file in /etc: /var/lib/agent-supervisor/<fleet>) from where it really lives.
        policy = with_state_default(load_policy(path.read_text(), source=str(path),
                                                base_dir=real.parent), real, {})
    if args.command == "install":
        return install(policy, real, args)
    return uninstall(policy, args)
