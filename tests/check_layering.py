#!/usr/bin/env python3
"""The rooms of the tree and what each may include (docs/architecture.md).

Reads every #include "..." of the C++/CUDA sources under the rooms below and
fails, naming the file, line and include, where a room reaches one it may not:
the workers never include the coordinator's code nor the coordinator theirs,
common/'s rooms only those below them, kernels/ nothing of ours. A CMake rule
(CMakeLists.txt) checks the same of what each binary links.
"""
import os
import re
import sys

# Room -> the rooms its files may include (itself always).
ALLOWED = {
    "kernels": set(),
    "common/base": set(),
    "common/format": {"common/base", "kernels"},
    "common/text": {"common/base", "common/format"},
    "common/model": {"common/base", "common/format", "kernels"},
    "common/compute": {"common/base", "common/format", "common/model", "kernels"},
    "common/shard": {"common/base", "common/format", "common/model", "common/compute", "kernels"},
    "common/plan": {"common/base", "common/format", "common/model", "common/compute", "kernels"},
    "common/transport": {"common/base", "common/format", "common/model", "common/compute",
                         "common/shard", "kernels", "proto"},
    "common/offline": {"common/base", "common/format", "common/text", "common/model",
                       "common/compute", "common/plan", "kernels"},
}
COMMON = {r for r in ALLOWED if r.startswith("common/")}
RUNTIME = COMMON - {"common/offline"} | {"kernels", "proto"}
# The coordinator's rooms: the router knows only common/; the engine drives
# the router; the handles on workers and the serving of clients sit on the
# engine, and neither knows the other; the topology starts the workers.
ALLOWED["coordinator/route"] = RUNTIME
ALLOWED["coordinator/engine"] = RUNTIME | {"coordinator/route"}
ALLOWED["coordinator/workers"] = RUNTIME | {"coordinator/route", "coordinator/engine"}
ALLOWED["coordinator/serve"] = RUNTIME | {"coordinator/route", "coordinator/engine"}
ALLOWED["coordinator/topology"] = RUNTIME | {"coordinator/route", "coordinator/engine",
                                             "coordinator/workers"}
ALLOWED["coordinator"] = RUNTIME
ALLOWED["gpu_worker"] = COMMON - {"common/offline"} | {"kernels", "proto"}
ALLOWED["cpu_worker"] = COMMON - {"common/offline"} | {"kernels", "proto"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc")


def room_of(path):
    """The longest room that is a prefix of `path` (None: not a room)."""
    best = None
    for room in ALLOWED:
        if path == room or path.startswith(room + "/"):
            if best is None or len(room) > len(best):
                best = room
    return best


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    problems, files = [], 0
    for top in ("kernels", "common", "coordinator", "gpu_worker", "cpu_worker"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                room = room_of(path)
                if room is None:
                    problems.append(f"{path}: lies in no room (add it to ALLOWED)")
                    continue
                files += 1
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if "/" not in target:
                            continue  # a file next to it, or generated
                        to = room_of(target)
                        if to is None and target.split("/")[0] in ("cli", "tests"):
                            to = target.split("/")[0]
                        if to is None or to == room or to in ALLOWED[room]:
                            continue
                        problems.append(f"{path}:{n}: {room} may not include {target} ({to})")
    for p in problems:
        print(p)
    print(f"check_layering: {files} files, {len(problems)} problems")
    return 1 if problems or files < 100 else 0


if __name__ == "__main__":
    sys.exit(main())
