#include "common/base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/memory_limits.h"

namespace pi {
namespace {

constexpr size_t kBufferBytes = 1 << 20;

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// write(2) until done, retrying interrupted calls.
bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Resolves a symlink at `path` to the file it names and refuses a target
// that exists and is not a regular file. *mode: the permission bits the new
// file gets (the old file's, or 0666 less the umask).
Status ResolveTarget(const std::string& path, std::string* target, mode_t* mode) {
  if (path.empty()) return Status::Error("cannot write a file with an empty name");
  *target = path;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char resolved[PATH_MAX];
    if (realpath(path.c_str(), resolved) == nullptr) {
      return Status::Error("%s: a symlink that cannot be followed: %s", path.c_str(),
                           strerror(errno));
    }
    *target = resolved;
  }
  if (stat(target->c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return Status::Error("%s exists and is %s: refusing to replace it", path.c_str(),
                           KindOf(st.st_mode));
    }
    *mode = st.st_mode & 07777;
  } else if (errno != ENOENT) {
    return Status::Io("%s: %s", path.c_str(), strerror(errno));
  } else {
    const mode_t mask = umask(0);
    umask(mask);
    *mode = 0666 & ~mask;
  }
  return Status::Ok();
}

}  // namespace

Status CheckOutputPath(const std::string& path) {
  std::string target;
  mode_t mode;
  PI_RETURN_IF_ERROR(ResolveTarget(path, &target, &mode));
  const std::string dir = DirName(target);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("%s: its folder %s does not exist", path.c_str(), dir.c_str());
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return Status::Io("%s: cannot write in %s: %s", path.c_str(), dir.c_str(), strerror(errno));
  }
  return Status::Ok();
}

AtomicFile::~AtomicFile() {
  Abandon();
}

void AtomicFile::Abandon() {
  if (fd_ >= 0) close(fd_);
  if (!temp_.empty()) unlink(temp_.c_str());
  fd_ = -1;
  temp_.clear();
}

Status AtomicFile::Open(const std::string& path) {
  Abandon();
  path_ = path;
  mode_t mode = 0;
  PI_RETURN_IF_ERROR(ResolveTarget(path, &target_, &mode));
  std::string name = DirName(target_) + "/." + BaseName(target_) + ".tmp.XXXXXX";
  const int fd = mkstemp(name.data());
  if (fd < 0) {
    return Status::Io("%s: cannot create a temporary file in %s: %s", path.c_str(),
                      DirName(target_).c_str(), strerror(errno));
  }
  fd_ = fd;
  temp_ = name;
  if (fchmod(fd_, mode) != 0) {
    const Status s = Status::Io("%s: cannot set permissions: %s", temp_.c_str(), strerror(errno));
    Abandon();
    return s;
  }
  buffer_.clear();
  buffer_.reserve(kBufferBytes);
  return Status::Ok();
}

Status AtomicFile::Reserve(int64_t bytes) {
  if (fd_ < 0) return Status::Error("%s: not open for writing", path_.c_str());
  return CheckDiskSpace("writing " + path_, temp_, bytes);
}

Status AtomicFile::Write(const void* data, size_t n) {
  if (fd_ < 0) return Status::Error("%s: not open for writing", path_.c_str());
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.append(p, n);
    return Status::Ok();
  }
  if (!WriteAll(fd_, buffer_.data(), buffer_.size()) || !WriteAll(fd_, p, n)) {
    const Status s = Status::Io("%s: write failed: %s", path_.c_str(), strerror(errno));
    Abandon();
    return s;
  }
  buffer_.clear();
  return Status::Ok();
}

Status AtomicFile::Commit() {
  if (fd_ < 0) return Status::Error("%s: not open for writing", path_.c_str());
  Status s;
  if (!WriteAll(fd_, buffer_.data(), buffer_.size())) {
    s = Status::Io("%s: write failed: %s", path_.c_str(), strerror(errno));
  } else if (fsync(fd_) != 0) {
    s = Status::Io("%s: fsync failed: %s", path_.c_str(), strerror(errno));
  } else if (close(fd_) != 0) {
    s = Status::Io("%s: close failed: %s", path_.c_str(), strerror(errno));
  }
  if (s.ok()) {
    fd_ = -1;
    if (rename(temp_.c_str(), target_.c_str()) != 0) {
      s = Status::Io("%s: cannot rename the temporary into place: %s", path_.c_str(),
                     strerror(errno));
    }
  }
  if (!s.ok()) {
    Abandon();
    return s;
  }
  temp_.clear();
  buffer_.clear();
  // The rename is durable once the directory is: best effort (some file
  // systems refuse to fsync a directory, and the data is already written).
  const int dir = open(DirName(target_).c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path,
                           const std::function<Status(AtomicFile* file)>& write) {
  AtomicFile file;
  PI_RETURN_IF_ERROR(file.Open(path));
  PI_RETURN_IF_ERROR(write(&file));
  return file.Commit();
}

}  // namespace pi
