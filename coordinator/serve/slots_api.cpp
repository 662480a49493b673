#include "coordinator/serve/slots_api.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

namespace pi {
namespace {

using json = nlohmann::json;

// The query's action (action=save|restore|erase); anything else refused.
Status ParseAction(const std::string& query, SlotOp* op) {
  std::string action;
  size_t at = 0;
  while (at <= query.size() && !query.empty()) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string param = query.substr(at, end - at);
    const size_t eq = param.find('=');
    const std::string key = param.substr(0, eq);
    if (key == "action" && eq != std::string::npos) {
      action = param.substr(eq + 1);
    } else if (!param.empty()) {
      return Status::Invalid("query parameter %.64s is not supported (only action)", key.c_str());
    }
    at = end + 1;
  }
  if (action == "save") {
    *op = SlotOp::kSave;
  } else if (action == "restore") {
    *op = SlotOp::kRestore;
  } else if (action == "erase") {
    *op = SlotOp::kErase;
  } else {
    return Status::Invalid("action must be save, restore or erase (?action=...), got \"%.64s\"",
                           action.c_str());
  }
  return Status::Ok();
}

// The slot id in the path (a decimal below n_seq).
Status ParseSlotId(const std::string& path, int n_seq, int* id) {
  const std::string digits = path.substr(sizeof kSlotsPrefix - 1);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Invalid("the slot id must be a number: /slots/{id}?action=...");
  }
  *id = std::atoi(digits.c_str());
  if (*id >= n_seq) {
    return Status::Invalid("slot %d: this server's slots are 0 to %d (-np)", *id, n_seq - 1);
  }
  return Status::Ok();
}

// The body's filename (save and restore); nothing else is read from it.
Status ParseFilename(const std::string& body, std::string* filename) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Invalid("the body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "filename") return Status::Invalid("%.64s is not supported here", key.c_str());
  }
  const auto f = j.find("filename");
  if (f == j.end() || !f->is_string()) return Status::Invalid("filename: a string is required");
  *filename = f->get<std::string>();
  return CheckSlotFilename(*filename);
}

}  // namespace

Status CheckSlotFilename(const std::string& name) {
  if (name.empty() || name.size() > kMaxSlotFilename || name[0] == '.') {
    return Status::Invalid("filename must be 1 to %zu characters, not starting with a dot",
                           kMaxSlotFilename);
  }
  for (unsigned char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return Status::Invalid("filename may hold only A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  return Status::Ok();
}

void StartSlotAction(const HttpContext& c, const std::string& query, const std::string& body,
                     std::function<void()> notify, CompletionStart* out) {
  RequestRunner* runner = c.runner;
  const std::string& dir = c.options->slot_save_path;
  GenerationRequest request;
  std::string filename;
  Status s = ParseAction(query, &request.slot_op);
  if (s.ok()) s = ParseSlotId(c.path, runner->engine().n_seq(), &request.seq);
  if (s.ok() && request.slot_op != SlotOp::kErase) {
    if (dir.empty()) {
      out->refusal = ErrorReply(
          501, "this server does not save or restore slots: start it with --slot-save-path DIR");
      return;
    }
    s = ParseFilename(body, &filename);
    request.slot_path = dir + "/" + filename;
  }
  if (!s.ok()) {
    out->refusal = ErrorReply(400, s.message());
    return;
  }
  const SlotOp op = request.slot_op;
  const int id = request.seq;
  CompletionReply* reply = SubmitWholeJob(runner, std::move(request), std::move(notify), out);
  if (reply) reply->set_slot_action(op, id, filename);
}

std::string SlotActionJson(SlotOp op, int id_slot, const std::string& filename,
                           const GenerationResult& g) {
  const double ms = g.prompt_s * 1e3;
  json j;
  switch (op) {
    case SlotOp::kSave:
      j = {{"id_slot", id_slot},
           {"filename", filename},
           {"n_saved", g.slot_tokens},
           {"n_written", g.slot_bytes},
           {"timings", {{"save_ms", ms}}}};
      break;
    case SlotOp::kRestore:
      j = {{"id_slot", id_slot},
           {"filename", filename},
           {"n_restored", g.slot_tokens},
           {"n_read", g.slot_bytes},
           {"timings", {{"restore_ms", ms}}}};
      break;
    case SlotOp::kErase:
    case SlotOp::kNone:
      j = {{"id_slot", id_slot}, {"n_erased", g.slot_tokens}};
      break;
  }
  return j.dump();
}

}  // namespace pi
