#include "cli/model_stats.h"

#include <sys/stat.h>

#include <cstdio>

namespace pi {

Status ReadModelStats(const char* tool, const char* need, const std::string& model_path,
                      const std::string& stats_path, const LlamaModel& model,
                      ActivationStats* stats, std::string* path_out) {
  const std::string path = stats_path.empty() ? DefaultStatsPath(model_path) : stats_path;
  if (path_out) *path_out = path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return Status::NotFound("%s: no %s (run pi-profile -m %s -f CORPUS, or pass --stats FILE)",
                            need, path.c_str(), model_path.c_str());
  }
  PI_RETURN_IF_ERROR(ReadActivationStats(path, stats));
  std::string note;
  PI_RETURN_IF_ERROR(CheckStatsMatchModel(*stats, model, &note).WithContext(path));
  if (!note.empty()) fprintf(stderr, "%s: %s: %s\n", tool, path.c_str(), note.c_str());
  return Status::Ok();
}

}  // namespace pi
