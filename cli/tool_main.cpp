#include "cli/tool_main.h"

#include <cstdio>
#include <exception>
#include <new>

#include "common/mapped_files.h"

namespace pi {

int RunTool(const char* tool, int (*body)(int argc, char** argv), int argc, char** argv) {
  InstallMappedFileFaultHandler(tool);
  try {
    return body(argc, argv);
  } catch (const std::bad_alloc&) {
    fprintf(stderr,
            "%s: out of memory: an allocation failed (a smaller -c, -b, -n or model may fit)\n",
            tool);
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
  }
  return 1;
}

}  // namespace pi
