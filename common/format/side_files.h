// Side files: what tools keep beside a model — its activation statistics,
// placement plans. Beside the model when its folder can be written; else (a
// read-only model store, a system folder) in $XDG_CACHE_HOME/pi, or
// ~/.cache/pi, under the model file's name. Readers look beside the model
// first (statistics may ship with it), then in the cache.
#pragma once

#include <string>

namespace pi {

// The model's path without a trailing ".gguf" (the stem side files share).
std::string ModelPathStem(const std::string& model_path);

// Where to write the side file `suffix` (".stats.gguf") of `model_path`; the
// cache folder is created when it is used.
std::string SideFileForWrite(const std::string& model_path, const std::string& suffix);

// Where to read it: beside the model if it is there, else the cache's if it
// is there, else where it would be written.
std::string SideFileForRead(const std::string& model_path, const std::string& suffix);

}  // namespace pi
