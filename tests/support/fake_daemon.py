"""A daemon for the driver tests that runs from a pid file, as nvidia-persistenced, nv-fabricmanager or nv-hostengine
do where no systemd unit runs them. Not NVIDIA's code.

``fake_daemon.py PIDFILE``: forks into the background (the parent exits 0 once the child has written PIDFILE), opens
nvidia0 and nvidiactl under the root named by GPUOPS_SIMULATED_ROOT (tests/support/driver_files.add_holder, with its
real PID), and on SIGTERM closes them, removes PIDFILE and exits."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support import driver_files as df  # noqa: E402  pylint: disable=wrong-import-position


def main(pid_file):
    root = os.environ[df.ENV_ROOT]
    read_end, write_end = os.pipe()
    if os.fork():
        os.close(write_end)
        os.read(read_end, 1)  # the child is ready
        return 0
    os.close(read_end)
    os.setsid()
    pid = os.getpid()

    def stop(_signum, _frame):
        df.remove_holder(root, pid)
        if os.path.exists(pid_file):
            os.unlink(pid_file)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    df.add_holder(root, pid, [sys.executable, os.path.abspath(__file__), pid_file])
    os.makedirs(os.path.dirname(pid_file), exist_ok=True)
    with open(pid_file, "w") as handle:
        handle.write("%d\n" % pid)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.write(write_end, b"x")
    os.close(write_end)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
