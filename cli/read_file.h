// Reads a whole file (a corpus, a prompt) into memory: what the tools that
// take -f do before tokenizing.
#pragma once

#include <string>

#include "common/base/status.h"

namespace pi {

// *out = the bytes of `path`. Fails with "cannot read 'path': why" when it
// cannot be opened, is a directory or another non-regular file (a FIFO is
// refused without waiting for a writer), or a read fails.
Status ReadWholeFile(const std::string& path, std::string* out);

// *out = everything on standard input up to its end (`-f -`), checked
// against the memory available as it grows.
Status ReadStandardInput(std::string* out);

}  // namespace pi
