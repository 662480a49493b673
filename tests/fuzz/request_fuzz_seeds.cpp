// Writes request_fuzz's seeds: valid GenerateRequests (text, ids, sampling,
// stops) and TokenizeRequests, each after its selector byte.
#include <string>
#include <vector>

#include "proto/pi.pb.h"
#include "tests/fuzz/seed_file.h"

namespace {

bool Write(const std::string& dir, const std::string& name, uint8_t selector,
           const google::protobuf::Message& m) {
  std::string bytes(1, static_cast<char>(selector));
  bytes += m.SerializeAsString();
  return pi::WriteSeedFile(dir + "/" + name, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  pi::v1::GenerateRequest text;
  text.set_prompt("In the beginning God created");
  text.set_n_predict(32);
  pi::v1::GenerateRequest sampled = text;
  sampled.mutable_sampling()->set_temperature(0.7f);
  sampled.mutable_sampling()->set_top_k(20);
  sampled.mutable_sampling()->set_top_p(0.9f);
  sampled.mutable_sampling()->set_seed(42);
  sampled.add_stop("\n");
  sampled.add_stop("LORD");
  pi::v1::GenerateRequest ids;
  for (int32_t id : {1, 1039, 261, 2078}) ids.mutable_prompt_ids()->add_ids(id);
  ids.set_ignore_eos(true);
  pi::v1::GenerateRequest unicode;
  unicode.set_prompt("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 <s> </s>");
  pi::v1::TokenizeRequest tokenize;
  tokenize.set_text("And God said, Let there be light");
  tokenize.set_add_bos(false);
  const bool ok = Write(dir, "text", 0, text) && Write(dir, "sampled", 0, sampled) &&
                  Write(dir, "ids", 0, ids) && Write(dir, "unicode", 0, unicode) &&
                  Write(dir, "tokenize", 1, tokenize);
  return ok ? 0 : 1;
}
