// TempPath: a scratch file name unique to the running test and process.
// ctest runs each test case as its own process, several at once (-j), so a
// fixed name in TempDir() would be shared by concurrently running cases. A
// pid alone is not enough either: pids repeat across runs (in a container
// they start low each time), and a FIFO or socket left by an earlier run
// under the same name makes mkfifo or bind fail. So each process makes its
// own fresh folder (mkdtemp) on first use and removes it, with everything in
// it, when it exits; PI_KEEP_TEST_FILES=1 keeps it for a look after a failure.
#pragma once

#include <ftw.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pi {

namespace temp_path_internal {

inline int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  remove(path);
  return 0;
}

// Fixed storage, not a std::string: the exit handler runs after static
// objects constructed later than its registration have been destroyed.
inline char scratch_dir[PATH_MAX];
inline pid_t scratch_owner = 0;

inline void RemoveScratchDir() {
  // A forked child that calls exit() must not take its parent's files.
  if (getpid() != scratch_owner) return;
  const char* keep = getenv("PI_KEEP_TEST_FILES");
  if (keep != nullptr && strcmp(keep, "1") == 0) return;
  nftw(scratch_dir, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace temp_path_internal

// This process's scratch folder, made on first use.
inline std::string ScratchDir() {
  namespace in = temp_path_internal;
  if (in::scratch_owner != getpid()) {
    std::string tmpl = ::testing::TempDir();
    if (tmpl.empty() || tmpl.back() != '/') tmpl += '/';
    tmpl += "pi_test_XXXXXX";
    if (tmpl.size() >= sizeof(in::scratch_dir) || mkdtemp(tmpl.data()) == nullptr) {
      fprintf(stderr, "TempPath: cannot make a scratch folder %s: %s\n", tmpl.c_str(),
              strerror(errno));
      abort();
    }
    snprintf(in::scratch_dir, sizeof(in::scratch_dir), "%s", tmpl.c_str());
    if (in::scratch_owner == 0) atexit(in::RemoveScratchDir);
    in::scratch_owner = getpid();
  }
  return in::scratch_dir;
}

inline std::string TempPath(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = t ? std::string(t->test_suite_name()) + "." + t->name() : "none";
  for (char& c : test) {
    if (c == '/') c = '_';
  }
  return ScratchDir() + "/" + test + "_" + name;
}

}  // namespace pi
