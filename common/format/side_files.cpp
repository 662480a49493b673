#include "common/format/side_files.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace pi {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string Folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Whether a file can be created in `dir`: tried (permission bits say nothing
// of a read-only mount or an immutable folder, nor to root).
bool CanCreateIn(const std::string& dir) {
  std::string probe = dir + "/.pi-write-probe-XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) return false;
  close(fd);
  unlink(probe.c_str());
  return true;
}

std::string CacheFolder() {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  std::string base = xdg && *xdg ? xdg : std::string(home && *home ? home : "/tmp") + "/.cache";
  return base + "/pi";
}

void MakeFolders(const std::string& path) {
  for (size_t at = 1; at != std::string::npos; at = path.find('/', at + 1)) {
    mkdir(path.substr(0, at).c_str(), 0755);
  }
  mkdir(path.c_str(), 0755);
}

std::string CachePath(const std::string& model_path, const std::string& suffix) {
  const std::string stem = ModelPathStem(model_path);
  const size_t slash = stem.find_last_of('/');
  return CacheFolder() + "/" + (slash == std::string::npos ? stem : stem.substr(slash + 1)) +
         suffix;
}

}  // namespace

std::string ModelPathStem(const std::string& model_path) {
  const std::string ext = ".gguf";
  if (model_path.size() > ext.size() &&
      model_path.compare(model_path.size() - ext.size(), ext.size(), ext) == 0) {
    return model_path.substr(0, model_path.size() - ext.size());
  }
  return model_path;
}

std::string SideFileForWrite(const std::string& model_path, const std::string& suffix) {
  if (CanCreateIn(Folder(model_path))) return ModelPathStem(model_path) + suffix;
  MakeFolders(CacheFolder());
  return CachePath(model_path, suffix);
}

std::string SideFileForRead(const std::string& model_path, const std::string& suffix) {
  const std::string beside = ModelPathStem(model_path) + suffix;
  if (Exists(beside)) return beside;
  const std::string cached = CachePath(model_path, suffix);
  if (Exists(cached)) return cached;
  return SideFileForWrite(model_path, suffix);
}

}  // namespace pi
