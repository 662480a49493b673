#include "cli/read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/memory_limits.h"

namespace pi {

Status ReadWholeFile(const std::string& path, std::string* out) {
  // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::Error("cannot read '%s': %s", path.c_str(), strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    close(fd);
    return Status::Error("cannot read '%s': %s", path.c_str(),
                         dir ? "it is a directory" : "not a regular file");
  }
  const Status fits = CheckMemory("reading '" + path + "'", static_cast<int64_t>(st.st_size));
  if (!fits.ok()) {
    close(fd);
    return fits;
  }
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = read(fd, &data[done], data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Status::Error("cannot read '%s': %s", path.c_str(), strerror(err));
    }
    if (n == 0) break;  // shrank while read: keep what is there
    done += static_cast<size_t>(n);
  }
  close(fd);
  data.resize(done);
  *out = std::move(data);
  return Status::Ok();
}

Status ReadStandardInput(std::string* out) {
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error("cannot read standard input: %s", strerror(errno));
    }
    // A check per 64 MiB: a runaway pipe is an error naming it, not an abort.
    if ((data.size() >> 26) != ((data.size() + static_cast<size_t>(n)) >> 26)) {
      PI_RETURN_IF_ERROR(CheckMemory("reading standard input",
                                     static_cast<int64_t>(data.size()) + (int64_t{1} << 26)));
    }
    data.append(buf, static_cast<size_t>(n));
  }
  *out = std::move(data);
  return Status::Ok();
}

}  // namespace pi
