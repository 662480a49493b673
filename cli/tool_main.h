// RunTool: the boundary every tool's main() goes through. Whatever escapes
// the tool's body becomes a message and an exit status instead of an abort:
// std::bad_alloc ("out of memory"), any other exception (its what()), and a
// SIGBUS from a mapped model file that another program truncated (the file
// is named; common/base/mapped_files.h).
#pragma once

#include <initializer_list>
#include <string>

namespace pi {

// Runs body(argc, argv) and returns its status; 1 after an escaped error.
// `tool --version` alone prints the version and commit instead.
int RunTool(const char* tool, int (*body)(int argc, char** argv), int argc, char** argv);

// The version and commit --version prints, as one word ("b0.1.0-abc1234",
// llama-server's shape): the HTTP API's system_fingerprint.
std::string BuildFingerprint();

// Checks, before any work, that each non-empty path could be written
// (common/base/atomic_file.h's CheckOutputPath); prints "tool: why" for the first
// that cannot and returns false.
bool CheckOutputs(const char* tool, std::initializer_list<std::string> paths);

}  // namespace pi
