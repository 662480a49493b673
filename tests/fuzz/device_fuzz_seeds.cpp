// Writes device_fuzz's seeds: well-formed sessions (a token's layers with
// their cold sums, ending with h, logits or nothing; the head alone; two
// tokens in a row; a sequence's cache saved, loaded, copied and dropped;
// its kept bytes read and written back)
// and the device hello.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/format/fingerprint.h"
#include "common/transport/device_message.h"
#include "common/transport/hello_message.h"
#include "tests/fuzz/device_fuzz_session.h"
#include "tests/fuzz/seed_file.h"

namespace {

std::vector<uint8_t> Request(uint64_t id, pi::StepKind op, int pos, int layer, int n_embd,
                             pi::DeviceOut out) {
  std::vector<uint8_t> m(pi::DeviceRequestBytes(n_embd));
  pi::WriteDeviceRequest(id, op, 0, pos, op == pi::StepKind::kBegin && pos % 2 == 1, layer, n_embd,
                         out, m.data());
  float* x = pi::DeviceRequestPayload(m.data());
  for (int i = 0; i < n_embd; ++i) x[i] = static_cast<float>((i * 37) % 11) * 0.1f - 0.5f;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  std::vector<uint8_t> bytes;
  pi::LlamaModel model;
  if (!pi::MakeStepFuzzModel(&bytes, &model)) return 1;
  const pi::LlamaConfig& c = model.config;
  const int d = c.n_embd;
  bool ok = true;
  int k = 0;
  for (pi::DeviceOut out : {pi::DeviceOut::kNothing, pi::DeviceOut::kH, pi::DeviceOut::kLogits}) {
    std::vector<uint8_t> session;
    for (int pos = 0; pos < 2; ++pos) {
      uint64_t id = 1;
      pi::AppendSessionMessage(Request(id++, pi::StepKind::kBegin, pos, 0, d, out), &session);
      for (int il = 0; il < c.n_layer; ++il) {
        pi::AppendSessionMessage(Request(id++, pi::StepKind::kResume, 0, il, d, out), &session);
      }
    }
    ok &= pi::WriteSeedFile(dir + "/session" + std::to_string(k++) + ".bin", session);
  }
  std::vector<uint8_t> head;
  pi::AppendSessionMessage(Request(9, pi::StepKind::kHead, 0, 0, d, pi::DeviceOut::kLogits), &head);
  ok &= pi::WriteSeedFile(dir + "/head.bin", head);
  std::vector<uint8_t> seqs;  // a token, then its sequence's cache kept, loaded, copied, let go
  pi::AppendSessionMessage(Request(1, pi::StepKind::kBegin, 0, 0, d, pi::DeviceOut::kNothing),
                           &seqs);
  for (int il = 0; il < c.n_layer; ++il) {
    pi::AppendSessionMessage(
        Request(2 + il, pi::StepKind::kResume, 0, il, d, pi::DeviceOut::kNothing), &seqs);
  }
  const pi::StepKind kinds[4] = {pi::StepKind::kSeqSave, pi::StepKind::kSeqLoad,
                                 pi::StepKind::kSeqCopy, pi::StepKind::kSeqDrop};
  for (int i = 0; i < 4; ++i) {
    std::vector<uint8_t> m(pi::DeviceRequestBytes(d));
    pi::WriteDeviceSeqRequest(100 + i, kinds[i], 0, 1, 1, 5, d, m.data());
    pi::AppendSessionMessage(m, &seqs);
  }
  ok &= pi::WriteSeedFile(dir + "/seqs.bin", seqs);
  // A kept sequence read out and written back under another key, then loaded.
  std::vector<uint8_t> kept;
  std::vector<uint8_t> m(pi::DeviceRequestBytes(d));
  pi::WriteDeviceSeqRequest(200, pi::StepKind::kSeqSave, 0, 1, 0, 7, d, m.data());
  pi::AppendSessionMessage(m, &kept);
  const int64_t total = pi::SavedSeqBytes(c, pi::DeviceFuzzPlan(c), 1);
  const int64_t chunk = pi::DeviceKeptWriteChunk(d);
  std::vector<uint8_t> kept_bytes(static_cast<size_t>(total), 0x3c);
  uint64_t id = 201;
  pi::WriteDeviceKeptRequest(id++, pi::StepKind::kSeqRead, 1, 7, 0, std::min<int64_t>(total, 64),
                             nullptr, d, m.data());
  pi::AppendSessionMessage(m, &kept);
  for (int64_t at = 0; at < total; at += chunk) {
    pi::WriteDeviceKeptRequest(id++, pi::StepKind::kSeqWrite, 1, 8, at, std::min(chunk, total - at),
                               kept_bytes.data() + at, d, m.data());
    pi::AppendSessionMessage(m, &kept);
  }
  pi::WriteDeviceSeqRequest(id++, pi::StepKind::kSeqLoad, 0, 1, 0, 8, d, m.data());
  pi::AppendSessionMessage(m, &kept);
  ok &= pi::WriteSeedFile(dir + "/kept.bin", kept);
  std::vector<uint8_t> hello;
  pi::AppendSessionMessage(
      pi::WriteDeviceHello(pi::ModelFingerprint(*model.file), pi::DeviceFuzzPlan(c)), &hello);
  ok &= pi::WriteSeedFile(dir + "/hello.bin", hello);
  // --sparse teal's hello: gate and input thresholds (kHelloInputThresholds).
  pi::DevicePlan teal = pi::DeviceFuzzPlan(c);
  teal.mode = pi::SparseMode::kTeal;
  teal.gate_thresholds.assign(c.n_layer, 0.1f);
  for (std::vector<float>& t : teal.input_thresholds) t.assign(c.n_layer, 0.2f);
  std::vector<uint8_t> teal_hello;
  pi::AppendSessionMessage(pi::WriteDeviceHello(pi::ModelFingerprint(*model.file), teal),
                           &teal_hello);
  ok &= pi::WriteSeedFile(dir + "/hello-teal.bin", teal_hello);
  return ok ? 0 : 1;
}
