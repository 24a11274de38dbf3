"""Stopping a process started in a session of its own (`start_new_session=True`), with everything
it started: the scripts' servers."""
import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM to the group (a server removes its work directory and exits at once); SIGKILL if it
    has not exited after `grace` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
