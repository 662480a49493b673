// A model's activation statistics for a tool that needs them (--vram-budget's
// placement, --sparse cats' thresholds): from --stats FILE or where
// pi-profile writes them (DefaultStatsPath), checked against the model.
#pragma once

#include <string>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/plan/activation_stats.h"

namespace pi {

// Reads them into *stats; `need` starts the error when there are none
// ("--vram-budget needs activation statistics"), which then names the file
// and the pi-profile command that makes it. A note about statistics of
// another copy of the model goes to stderr, prefixed with `tool`. *path (if
// given) is the file read.
Status ReadModelStats(const char* tool, const char* need, const std::string& model_path,
                      const std::string& stats_path, const LlamaModel& model,
                      ActivationStats* stats, std::string* path = nullptr);

}  // namespace pi
