#include "cli/corpus.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "cli/activation_flag.h"
#include "cli/read_file.h"
#include "common/format/tensor_check.h"

namespace pi {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The corpus files: `path` itself, or the *.txt files of a folder, sorted by name.
Status ListCorpus(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::Error("cannot open '%s'", path.c_str());
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return Status::Ok();
  }
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return Status::Error("cannot read folder '%s'", path.c_str());
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (EndsWith(name, ".txt")) names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  if (names.empty()) return Status::Error("folder '%s' has no *.txt files", path.c_str());
  const std::string sep = EndsWith(path, "/") ? "" : "/";
  for (const std::string& n : names) files->push_back(path + sep + n);
  return Status::Ok();
}

}  // namespace

Status LoadModelAndTokenizer(const char* tool, const std::string& path,
                             const std::string& ffn_activation, bool check_tensors,
                             LlamaModel* model, std::unique_ptr<Tokenizer>* tok) {
  PI_RETURN_IF_ERROR(LoadLlamaModel(path, model));
  PI_RETURN_IF_ERROR(ApplyFfnActivationFlag(tool, ffn_activation, model));
  if (check_tensors) PI_RETURN_IF_ERROR(CheckTensorValues(*model->file, true).WithContext(path));
  return Tokenizer::FromGguf(*model->file, tok).WithContext(path);
}

Status ReadCorpus(const std::string& path, const Tokenizer& tok, int64_t max_tokens, Corpus* out) {
  std::vector<std::string> files;
  PI_RETURN_IF_ERROR(ListCorpus(path, &files));
  out->tokens.clear();
  out->files_read = 0;
  out->files_found = files.size();
  std::vector<int32_t> ids;
  std::string text;
  for (const std::string& file : files) {
    PI_RETURN_IF_ERROR(ReadWholeFile(file, &text));
    PI_RETURN_IF_ERROR(tok.Encode(text, false, &ids).WithContext(file));
    out->tokens.insert(out->tokens.end(), ids.begin(), ids.end());
    ++out->files_read;
    if (max_tokens > 0 && static_cast<int64_t>(out->tokens.size()) >= max_tokens) break;
  }
  if (out->tokens.empty())
    return Status::Error("the corpus '%s' encodes to no tokens", path.c_str());
  out->name = files.size() == 1 ? files[0]
                                : path + " (" + std::to_string(out->files_read) + " of " +
                                      std::to_string(files.size()) + " *.txt files)";
  return Status::Ok();
}

Status CorpusChunks::Make(const std::vector<int32_t>* tokens, int n_ctx, int32_t bos,
                          int64_t max_positions, CorpusChunks* out) {
  const int per_chunk = bos >= 0 ? n_ctx - 1 : n_ctx;
  if (per_chunk < 1) return Status::Error("-c %d leaves no room for text after bos", n_ctx);
  out->tokens_ = tokens;
  out->bos_ = bos;
  out->per_chunk_ = per_chunk;
  int64_t total = 0;
  for (size_t i = 0; i < tokens->size(); i += per_chunk) {
    total += std::min<int64_t>(per_chunk, tokens->size() - i) + (bos >= 0 ? 1 : 0);
  }
  out->positions_ = max_positions > 0 ? std::min(total, max_positions) : total;
  return Status::Ok();
}

Status CorpusChunks::Eval(Engine* engine, int n_batch, ProgressBar* bar) const {
  const std::vector<int32_t>& tokens = *tokens_;
  std::vector<int32_t> chunk;
  chunk.reserve(per_chunk_ + 1);
  int64_t done = 0;
  for (size_t i = 0; i < tokens.size() && done < positions_; i += per_chunk_) {
    chunk.clear();
    if (bos_ >= 0) chunk.push_back(bos_);
    const size_t end = std::min(tokens.size(), i + per_chunk_);
    chunk.insert(chunk.end(), tokens.begin() + i, tokens.begin() + end);
    if (static_cast<int64_t>(chunk.size()) > positions_ - done) chunk.resize(positions_ - done);
    engine->Reset();
    for (size_t j = 0; j < chunk.size(); j += n_batch) {
      const int n = static_cast<int>(std::min<size_t>(n_batch, chunk.size() - j));
      PI_RETURN_IF_ERROR(engine->Eval(chunk.data() + j, n));
      done += n;
      if (bar) bar->Update(done);
    }
  }
  return Status::Ok();
}

}  // namespace pi
