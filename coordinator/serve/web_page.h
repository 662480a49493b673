// The chat page pi-launch --http serves at / (coordinator/serve/web/index.html,
// compiled in by CMake: no file to find at run time, no build step for the
// page itself).
#pragma once

namespace pi {

extern const char kWebPage[];

}  // namespace pi
