// AtomicFile: the one way this project writes a file. The bytes go to a
// unique temporary file in the target's directory (mkstemp, so concurrent
// writers never share one), which is flushed, fsync'ed and renamed over the
// target, and the directory is fsync'ed: a reader sees the old file or the
// whole new one, never a part, and a crash or a failure leaves the target as
// it was. The temporary is removed on every failure path.
//
// The target is checked first: one that exists and is not a regular file
// (a directory, device node, FIFO or socket) is refused without being
// opened, so writing never blocks on a FIFO nor replaces /dev/null; a
// symlink is followed, so the file it points to is replaced and the link
// stays. An existing file's permission bits are kept; a new file gets
// 0666 less the umask, as fopen would give it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/base/status.h"

namespace pi {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();  // an uncommitted file's temporary is removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Checks the target and creates the temporary. Errors name `path`.
  Status Open(const std::string& path);
  // Checks that `bytes` more fit on the target's filesystem, so a large file
  // fails before it is written rather than at the end of the disk.
  Status Reserve(int64_t bytes);
  // Appends n bytes (buffered).
  Status Write(const void* data, size_t n);
  // Flushes, fsyncs, renames over the target and fsyncs its directory.
  Status Commit();

  // The file that will be replaced or created (symlinks resolved).
  const std::string& target() const { return target_; }

 private:
  void Abandon();

  std::string path_, target_, temp_;
  int fd_ = -1;
  std::string buffer_;
};

// The checks AtomicFile::Open makes, without writing: OK when `path` could be
// written (not a special file, its folder exists and is writable). Tools
// call it on their outputs before long work, so a bad -o fails at once.
Status CheckOutputPath(const std::string& path);

// Writes `path` through an AtomicFile: `write` appends the contents; its
// error (or any other) leaves the target untouched.
Status WriteFileAtomically(const std::string& path,
                           const std::function<Status(AtomicFile* file)>& write);

}  // namespace pi
