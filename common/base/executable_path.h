// Paths relative to the running executable: the worker binary installed or
// built beside a tool, the demo model in an installed share/ folder.
#pragma once

#include <string>

namespace pi {

// `name` resolved against the folder of the running executable
// (/proc/self/exe), e.g. "pi-cpu-worker" or "../share/pi/models/demo.gguf";
// `name` itself when that folder cannot be read.
std::string PathNextToExecutable(const std::string& name);

}  // namespace pi
