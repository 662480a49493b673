// The bundled demo model that pi-run, pi-bench and pi-perplexity use without -m.
#pragma once

#include <string>

namespace pi {

// models/demo-kjv-f16.gguf of the source tree the binary was built from, else
// ../share/pi/models/ next to the binary (an installed copy).
std::string DefaultModelPath();

}  // namespace pi
