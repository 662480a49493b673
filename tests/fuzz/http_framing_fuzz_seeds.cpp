// Writes http_framing_fuzz's seeds: requests well and badly framed — a body
// by Content-Length and chunked, a chunked body with a 64 KiB trailer field
// (which once aborted the server), many small trailer fields, a long chunk
// extension, a bad Content-Length, a header without a colon, a NUL byte, an
// unknown method and version, Expect: 100-continue, pipelined requests, and
// the API key.
#include <string>
#include <vector>

#include "tests/fuzz/seed_file.h"

namespace {

const char kKey[] = "Authorization: Bearer a-fuzz-api-key-0123456789\r\n";

bool Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  return pi::WriteSeedFile(dir + "/" + name, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

std::string Post(const std::string& path, const std::string& body, const std::string& extra) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + kKey + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  const std::string body = R"({"prompt":"In the beginning","max_tokens":4})";
  const std::string chunked_head = std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\n") +
                                   kKey + "Transfer-Encoding: chunked\r\n\r\n";
  char size[16];
  snprintf(size, sizeof size, "%zx", body.size());
  const std::string chunk = std::string(size) + "\r\n" + body + "\r\n";
  std::string tiny_trailers = chunked_head + chunk + "0\r\n";
  for (int i = 0; i < 2000; ++i) tiny_trailers += "T" + std::to_string(i) + ": v\r\n";
  tiny_trailers += "\r\n";
  const bool ok =
      Write(dir, "get_health", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n") &&
      Write(dir, "post", Post("/v1/completions", body, "")) &&
      Write(dir, "no_key", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}") &&
      Write(dir, "chunked", chunked_head + chunk + "0\r\n\r\n") &&
      Write(dir, "trailer_64k",
            chunked_head + chunk + "0\r\nX-Big: " + std::string(65536, 'a') + "\r\n\r\n") &&
      Write(dir, "tiny_trailers", tiny_trailers) &&
      Write(dir, "chunk_extension",
            chunked_head + std::string(size) + ";" + std::string(70000, 'e') + "\r\n" + body +
                "\r\n0\r\n\r\n") &&
      Write(dir, "bad_length", "POST /tokenize HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n{}") &&
      Write(dir, "no_colon", "GET /v1/models HTTP/1.1\r\nHost x\r\n\r\n") &&
      Write(dir, "nul", std::string("GET /metrics HTTP/1.1\r\nHo\0st: x\r\n\r\n", 35)) &&
      Write(dir, "method", "BREW /pot HTTP/1.1\r\n\r\n") &&
      Write(dir, "version", "GET / HTTP/7.0\r\n\r\n") &&
      Write(dir, "continue", Post("/tokenize", R"({"content":"a"})", "Expect: 100-continue\r\n")) &&
      Write(dir, "pipelined",
            "GET /health HTTP/1.1\r\n\r\nGET /v1/models HTTP/1.1\r\n" + std::string(kKey) + "\r\n" +
                Post("/detokenize", R"({"tokens":[1,2]})", "")) &&
      Write(dir, "huge_header",
            "GET /health HTTP/1.1\r\nX: " + std::string(20000, 'h') + "\r\n\r\n");
  return ok ? 0 : 1;
}
