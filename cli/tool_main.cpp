#include "cli/tool_main.h"

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "common/base/atomic_file.h"
#include "common/base/mapped_files.h"

namespace pi {

std::string BuildFingerprint() {
  // llama-server's shape ("b" + its build, "-", the commit), which clients
  // written for it take apart.
  return std::string("b") + PI_VERSION + "-" + PI_COMMIT;
}

int RunTool(const char* tool, int (*body)(int argc, char** argv), int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    printf("%s (pi) %s, commit %s, %s build\n", tool, PI_VERSION, PI_COMMIT,
           *PI_BUILD_TYPE ? PI_BUILD_TYPE : "default");
    return 0;
  }
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

bool CheckOutputs(const char* tool, std::initializer_list<std::string> paths) {
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    const Status s = CheckOutputPath(path);
    if (!s.ok()) {
      fprintf(stderr, "%s: %s\n", tool, s.message().c_str());
      return false;
    }
  }
  return true;
}

}  // namespace pi
