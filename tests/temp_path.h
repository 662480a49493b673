// TempPath: a scratch file name unique to the running test and process.
// ctest runs each test case as its own process, several at once (-j), so a
// fixed name in TempDir() would be shared by concurrently running cases.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace pi {

inline std::string TempPath(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = t ? std::string(t->test_suite_name()) + "." + t->name() : "none";
  for (char& c : test) {
    if (c == '/') c = '_';
  }
  return ::testing::TempDir() + "/pi_" + test + "_" + std::to_string(getpid()) + "_" + name;
}

}  // namespace pi
