"""Helpers of the multi-process tests (launch_test.py, remote_worker_test.py, the HTTP
tests, ...): named checks counted and reported, a server process on 127.0.0.1 whose address
is read from its stderr, the demo model stored with ffn_down_t (and profiled), and Python
gRPC stubs generated from proto/pi.proto."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_MODEL = os.path.join(ROOT, "models", "demo-kjv-f16.gguf")
_counts = {"passed": 0, "failed": 0}


def asan_memory_factor():
    """How much more memory the servers take under AddressSanitizer (test.sh's second suite
    sets ASAN_OPTIONS): their allocations carry red zones and shadow memory. Memory bounds
    are multiplied by it. Freed memory's quarantine is kept small for the servers started
    after this call, so that what a test measures is what the server holds."""
    if "ASAN_OPTIONS" not in os.environ:
        return 1
    if "quarantine_size_mb" not in os.environ["ASAN_OPTIONS"]:
        os.environ["ASAN_OPTIONS"] += ":quarantine_size_mb=8:thread_local_quarantine_size_kb=64"
    return 3


def check(cond, what):
    """Prints and counts one named check."""
    key = "passed" if cond else "failed"
    _counts[key] += 1
    print(f"{'ok  ' if cond else 'FAIL'} {what}", flush=True)


def failures():
    return _counts["failed"]


def finish(skipped=False):
    """Prints the counts and exits: 1 with a failure, else 0 (77, ctest's skip, when
    `skipped` says part of the test could not run)."""
    print(f"{_counts['passed']} passed, {_counts['failed']} failed", flush=True)
    sys.exit(1 if _counts["failed"] else 77 if skipped else 0)


def demo_down_t(bin_dir, tmp, profile=False):
    """The demo model stored with ffn_down_t (a sparse-capable copy) in tmp, with its
    activation statistics when `profile` (for --vram-budget)."""
    path = os.path.join(tmp, "demo-down-t.gguf")
    subprocess.run([os.path.join(bin_dir, "pi-quantize"), DEMO_MODEL, path, "f16", "--down-t"],
                   capture_output=True, check=True, timeout=300)
    if profile:
        subprocess.run([os.path.join(bin_dir, "pi-profile"), "-m", path, "-f",
                        os.path.join(ROOT, "models", "kjv-valid.txt"), "--max-tokens", "1024"],
                       capture_output=True, check=True, timeout=300)
    return path


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


def launch_http(bin_dir, log_path, *args, http_port=0):
    """pi-launch with its gRPC port and --http on 127.0.0.1 (free ports unless `http_port`;
    the HTTP address, from its log, in `.http`; None when it exited or took over 60 s)."""
    p = ServerProcess([os.path.join(bin_dir, "pi-launch"), "--listen", "127.0.0.1:0", "--http",
                       f"127.0.0.1:{http_port}", *args], log_path)
    deadline = time.monotonic() + 60
    p.http = None
    while time.monotonic() < deadline and p.http is None and p.proc.poll() is None:
        for line in p.stderr().splitlines():
            if "HTTP API" in line:
                p.http = line.rsplit("http://", 1)[1].split()[0]
        time.sleep(0.05)
    return p


def http_final(reply):
    """A raw HTTP reply without the interim 1xx responses before it (which clients skip)."""
    while reply.startswith(b"HTTP/1.1 1") and b"\r\n\r\n" in reply:
        reply = reply.split(b"\r\n\r\n", 1)[1]
    return reply


def http_status(reply):
    """A raw reply's final status (0 when there is none)."""
    try:
        return int(http_final(reply).split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def http_body(reply):
    """A raw reply's final body, a chunked one joined."""
    head, _, rest = http_final(reply).partition(b"\r\n\r\n")
    if b"chunked" not in head.lower():
        return rest
    out = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2:]
    return out


def proc_status(pid, key):
    """A number from /proc/PID/status ("Threads:", "VmRSS:" in kB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def rss_mb(pid):
    return proc_status(pid, "VmRSS:") / 1024


class Peaks:
    """With-block: the most threads and RSS (MB) a process reached during it, sampled every
    10 ms (`base_threads`, `base_rss` at its start; `threads`, `rss` the peaks)."""

    def __init__(self, pid):
        self.pid = pid

    def __enter__(self):
        self.base_threads = self.threads = proc_status(self.pid, "Threads:")
        self.base_rss = self.rss = rss_mb(self.pid)
        self._done = threading.Event()
        self._watcher = threading.Thread(target=self._watch)
        self._watcher.start()
        return self

    def _watch(self):
        while not self._done.is_set():
            self.threads = max(self.threads, proc_status(self.pid, "Threads:"))
            self.rss = max(self.rss, rss_mb(self.pid))
            time.sleep(0.01)

    def __exit__(self, *exc):
        self._done.set()
        self._watcher.join()
        return False


def recv_all(sock):
    """Everything a socket gives until the peer closes it (or an error or timeout)."""
    data = b""
    try:
        while True:
            d = sock.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    return data


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
