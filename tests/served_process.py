"""Helpers of the multi-process tests (launch_test.py, remote_worker_test.py): a server
process on 127.0.0.1 whose address is read from its stderr, and Python gRPC stubs generated
from proto/pi.proto."""

import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServerProcess:
    """A server started with --listen 127.0.0.1:0; ready once its stderr says
    "... on 127.0.0.1:PORT" (then `address`; None when it exited or took over 120 s)."""

    def __init__(self, argv, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        self.address = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r" on (127\.0\.0\.1:\d+)", self.stderr())
            if m:
                self.address = m.group(1)
                break
            time.sleep(0.05)
        if self.address is None:
            print(self.stderr())

    def stderr(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` (if still running) and returns the exit status (killed after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


def child_pids(parent, name):
    """The pids of `parent`'s children whose command line mentions `name` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if ppid == parent and name in cmdline:
            found.append(int(entry))
    return found


def import_stubs(protoc, plugin, out):
    """Generates pi_pb2 / pi_pb2_grpc from proto/pi.proto into `out`; returns them."""
    subprocess.run([protoc, "-I", ROOT, f"--python_out={out}", f"--grpc_out={out}",
                    f"--plugin=protoc-gen-grpc={plugin}", os.path.join(ROOT, "proto", "pi.proto")],
                   check=True, timeout=60)
    sys.path.insert(0, out)
    from proto import pi_pb2, pi_pb2_grpc
    return pi_pb2, pi_pb2_grpc
