// Writes step_fuzz's seeds: valid requests (one row, two rows, all owned
// neurons, a few ids, none) and a valid hello for its shard.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/format/fingerprint.h"
#include "common/transport/hello_message.h"
#include "tests/fuzz/seed_file.h"
#include "tests/fuzz/step_fuzz_model.h"

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  std::vector<uint8_t> bytes;
  pi::LlamaModel model;
  if (!pi::MakeStepFuzzModel(&bytes, &model)) return 1;
  const pi::ShardLayout layout = pi::StepFuzzLayout(model.config);
  const int d = model.config.n_embd;
  std::vector<float> x(2 * d);
  for (int i = 0; i < 2 * d; ++i) x[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  bool ok = true;
  int k = 0;
  for (int batch : {1, 2}) {
    for (int32_t n : {-1, 0, 3}) {
      // Every row the first n owned neurons; the second row of two, one fewer.
      const int32_t row_n[2] = {n, n > 0 ? n - 1 : n};
      const std::vector<int32_t>& owned = layout.owned[k % 2];
      std::vector<int32_t> ids(owned.begin(), owned.begin() + std::max(n, 0));
      ids.insert(ids.end(), owned.begin(), owned.begin() + std::max(n - 1, 0));
      const int32_t* rows = n < 0 ? nullptr : row_n;
      const int64_t n_ids = pi::StepIdCount(batch, rows);
      std::vector<uint8_t> m(pi::StepRequestBytes(batch, d, n_ids));
      pi::WriteStepRequest(k, k % 2, batch, d, x.data(), ids.data(), rows, m.data());
      ok &= pi::WriteSeedFile(dir + "/step" + std::to_string(k) + ".bin", m);
      // The same with gate dots (a --sparse teal session's), one per candidate.
      const int64_t n_gates = n_ids < 0 ? static_cast<int64_t>(owned.size()) * batch : n_ids;
      std::vector<uint8_t> t(pi::StepRequestBytes(batch, d, n_ids, n_gates));
      float* gates = pi::WriteStepRequest(k, k % 2, batch, d, x.data(), ids.data(), rows, t.data());
      for (int64_t j = 0; j < n_gates; ++j) gates[j] = 0.1f * static_cast<float>(j % 7) - 0.3f;
      ok &= pi::WriteSeedFile(dir + "/step_teal" + std::to_string(k++) + ".bin", t);
    }
  }
  ok &= pi::WriteSeedFile(dir + "/hello.bin",
                          pi::WriteHello(pi::ModelFingerprint(*model.file), 2, layout.owned));
  // --sparse cats': one gate threshold per layer.
  const std::vector<float> levels(layout.owned.size(), 0.25f);
  ok &= pi::WriteSeedFile(dir + "/hello_cats.bin", pi::WriteHello(pi::ModelFingerprint(*model.file),
                                                                  2, layout.owned, levels));
  ok &= pi::WriteSeedFile(dir + "/hello_teal.bin", pi::WriteHello(pi::ModelFingerprint(*model.file),
                                                                  2, layout.owned, levels, true));
  return ok ? 0 : 1;
}
