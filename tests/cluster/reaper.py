#!/usr/bin/env python3
"""The minicluster's stand-in for a node's init: `reaper.py CMD...` runs CMD
(a daemon that forks into the background, here slurmd) under a detached
process that is the child subreaper of everything CMD leaves behind, and
reaps each orphan the moment it ends.

Why: on a real node, a daemon's orphans (slurmstepd after a slurmd restart,
syndeo's node agent after the prolog) are reparented to systemd, which reaps
them at once. The minicluster's nodes have no init of their own, so their
orphans go to this machine's PID 1, which here reaps only every ~2 s; the
epilog, which waits until the job's agent is gone, would measure that.

The caller gets CMD's exit status, as if it had run CMD itself. The reaper
lives on until it has no child left, and then exits."""
import ctypes
import os
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv):
    if len(argv) < 2:
        sys.exit("usage: reaper.py CMD [ARG...]")
    status_r, status_w = os.pipe()
    if os.fork() != 0:  # the caller's side: wait for CMD's status, pass it on
        os.close(status_w)
        code = os.read(status_r, 16)
        sys.exit(int(code) if code else 1)
    os.close(status_r)
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.write(status_w, b"1")
        sys.stderr.write(f"reaper: prctl: {os.strerror(ctypes.get_errno())}\n")
        os._exit(1)
    cmd = os.fork()
    if cmd == 0:
        os.close(status_w)
        try:
            os.execvp(argv[1], argv[1:])
        except OSError as e:
            sys.stderr.write(f"reaper: {argv[1]}: {e}\n")
            os._exit(127)
    # From here on the caller's terminal or pipes are not ours to hold open.
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == cmd:  # a shell's exit code: 128+N for signal N
            code = os.waitstatus_to_exitcode(status)
            os.write(status_w, str(128 - code if code < 0 else code).encode())
            os.close(status_w)


if __name__ == "__main__":
    main(sys.argv)
