"""The Python tools' one way to write a file, as common/base/atomic_file.h is the C++
tools': a unique temporary in the target's folder, flushed, fsync'ed and renamed
over the target, removed on any failure; a target that exists and is not a
regular file is refused, a symlink is followed, an existing file keeps its
permission bits (a new one gets 0666 less the umask)."""

import os
import tempfile


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path, write, text=False):
    """Calls write(f) with a file object for the temporary (text mode with
    newline="" when `text`), then puts it in place of `path`."""
    if os.path.lexists(path) and not os.path.isfile(path):
        raise SystemExit("%s exists and is not a regular file: refusing to replace it" % path)
    real = os.path.realpath(path)  # a symlink is followed, not replaced
    mode = os.stat(real).st_mode & 0o7777 if os.path.exists(real) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(real) + ".", suffix=".tmp",
                               dir=os.path.dirname(real))
    try:
        with (os.fdopen(fd, "w", newline="") if text else os.fdopen(fd, "wb")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_png(fig, path, dpi):
    """A matplotlib figure as a PNG, written atomically."""
    write_atomically(path, lambda f: fig.savefig(f, dpi=dpi, format="png"))
