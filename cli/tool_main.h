// RunTool: the boundary every tool's main() goes through. Whatever escapes
// the tool's body becomes a message and an exit status instead of an abort:
// std::bad_alloc ("out of memory"), any other exception (its what()), and a
// SIGBUS from a mapped model file that another program truncated (the file
// is named; common/mapped_files.h).
#pragma once

namespace pi {

// Runs body(argc, argv) and returns its status; 1 after an escaped error.
int RunTool(const char* tool, int (*body)(int argc, char** argv), int argc, char** argv);

}  // namespace pi
