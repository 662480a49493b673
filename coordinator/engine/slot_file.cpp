#include "coordinator/engine/slot_file.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "common/format/fingerprint.h"
#include "coordinator/engine/engine.h"

namespace pi {
namespace {

constexpr const char* kSlotType = "pi.slot";

// A tensor's view checked for type and size: `count` elements of `type`.
Status SlotTensor(const GgufFile& file, const char* name, DType type, int64_t count,
                  const TensorInfo** out) {
  const TensorInfo* t = file.FindTensor(name);
  if (!t) return Status::Invalid("slot file: no %s tensor", name);
  if (t->type != type || t->n_dims != 1 || t->ne[0] != count) {
    return Status::Invalid("slot file: %s is %s %s, expected %s [%lld]", name, DTypeName(t->type),
                           t->ShapeString().c_str(), DTypeName(type),
                           static_cast<long long>(count));
  }
  *out = t;
  return Status::Ok();
}

std::string DeviceWords(const std::string& device) {
  return device.empty() ? std::string("no layers on a GPU") : "GPU layers " + device;
}

// The device's part of the layout: the same layers on a device of the same
// layout, the same hot neurons, the same bytes per position.
Status CheckDeviceLayout(const GgufFile& file, const SlotLayout& want) {
  std::string device;
  uint64_t placement = 0, row_bytes = 0;
  if (file.GetString("pi.slot.device", &device).ok()) {
    PI_RETURN_IF_ERROR(file.GetU64("pi.slot.placement", &placement));
    PI_RETURN_IF_ERROR(file.GetU64("pi.slot.device_kv_row_bytes", &row_bytes));
  }
  if (device != want.device) {
    return Status::Invalid("the slot file was saved by a server with %s; this one has %s",
                           DeviceWords(device).c_str(), DeviceWords(want.device).c_str());
  }
  if (placement != want.placement) {
    return Status::Invalid(
        "the slot file was saved with other hot neurons on the GPU (placement %s; this "
        "server's is %s): the same --vram-budget and statistics place them alike",
        FingerprintHex(placement).c_str(), FingerprintHex(want.placement).c_str());
  }
  if (static_cast<int64_t>(row_bytes) != want.device_kv_row_bytes) {
    return Status::Invalid(
        "the slot file holds %llu GPU KV bytes per position; this server's hold %lld",
        static_cast<unsigned long long>(row_bytes),
        static_cast<long long>(want.device_kv_row_bytes));
  }
  return Status::Ok();
}

// A hash of the plan's layers, head and every layer's hot neuron ids.
uint64_t PlacementHash(const DevicePlan& plan) {
  Fnv1a64 h;
  h.AddU64(static_cast<uint64_t>(plan.first_layer));
  h.AddU64(static_cast<uint64_t>(plan.n_layers));
  h.AddU64(plan.output ? 1 : 0);
  for (const std::vector<int32_t>& ids : plan.hot) {
    h.AddU64(ids.size());
    for (int32_t id : ids) h.AddU64(static_cast<uint64_t>(static_cast<int64_t>(id)));
  }
  return h.value();
}

Status CheckLayout(const GgufFile& file, const SlotLayout& want) {
  std::string type;
  if (!file.GetString("general.type", &type).ok() || type != kSlotType) {
    return Status::Invalid("not a slot file (general.type is not \"%s\")", kSlotType);
  }
  uint64_t fingerprint = 0, row_bytes = 0;
  uint32_t n_batch = 0;
  std::string k_type, v_type;
  PI_RETURN_IF_ERROR(file.GetU64("pi.slot.model_fingerprint", &fingerprint));
  PI_RETURN_IF_ERROR(file.GetString("pi.slot.cache_type_k", &k_type));
  PI_RETURN_IF_ERROR(file.GetString("pi.slot.cache_type_v", &v_type));
  PI_RETURN_IF_ERROR(file.GetU32("pi.slot.n_batch", &n_batch));
  PI_RETURN_IF_ERROR(file.GetU64("pi.slot.kv_row_bytes", &row_bytes));
  if (fingerprint != want.model_fingerprint) {
    return Status::Invalid(
        "the slot file was saved from another model (fingerprint %s; this "
        "server's model is %s)",
        FingerprintHex(fingerprint).c_str(), FingerprintHex(want.model_fingerprint).c_str());
  }
  if (k_type != DTypeName(want.k_type) || v_type != DTypeName(want.v_type)) {
    return Status::Invalid(
        "the slot file's KV cache is %s/%s; this server's is %s/%s "
        "(--cache-type-k/-v)",
        k_type.c_str(), v_type.c_str(), DTypeName(want.k_type), DTypeName(want.v_type));
  }
  if (static_cast<int64_t>(n_batch) != want.n_batch) {
    return Status::Invalid(
        "the slot file's prompt was evaluated in runs of %u tokens; this "
        "server's are %d (-b)",
        n_batch, want.n_batch);
  }
  PI_RETURN_IF_ERROR(CheckDeviceLayout(file, want));
  if (static_cast<int64_t>(row_bytes) != want.kv_row_bytes) {
    return Status::Invalid(
        "the slot file holds %llu KV bytes per position; this server's "
        "cache holds %lld",
        static_cast<unsigned long long>(row_bytes), static_cast<long long>(want.kv_row_bytes));
  }
  return Status::Ok();
}

}  // namespace

const char* SlotOpName(SlotOp op) {
  switch (op) {
    case SlotOp::kSave:
      return "save";
    case SlotOp::kRestore:
      return "restore";
    case SlotOp::kErase:
      return "erase";
    case SlotOp::kNone:
      break;
  }
  return "";
}

SlotLayout EngineSlotLayout(const Engine& engine) {
  SlotLayout l;
  l.model_fingerprint = ModelFingerprint(*engine.model().file);
  l.k_type = engine.cache_type_k();
  l.v_type = engine.cache_type_v();
  l.n_batch = engine.n_batch();
  l.n_ctx = engine.n_ctx();
  l.n_vocab = engine.n_vocab();
  l.kv_row_bytes = engine.host_kv_bytes_per_position();
  if (const DevicePlan* plan = engine.device_plan()) {
    l.device = engine.device_kept_layout();
    l.placement = PlacementHash(*plan);
    l.device_kv_row_bytes = SavedSeqBytes(engine.model().config, *plan, 1);
  }
  return l;
}

Status SerializeSlotFile(const SlotLayout& layout, const SlotState& state, GgufWriter* out) {
  const SavedSeq& s = state.seq;
  const int64_t n = s.n();
  if (n < 1 || n > layout.n_ctx || s.dense.size() != s.tokens.size() ||
      static_cast<int64_t>(s.host_kv.size()) != n * layout.kv_row_bytes ||
      static_cast<int64_t>(state.device_kv.size()) != n * layout.device_kv_row_bytes ||
      (!state.logits.empty() && static_cast<int64_t>(state.logits.size()) != layout.n_vocab)) {
    return Status::Invalid("a slot of %lld positions (%zu KV bytes) does not fit its layout",
                           static_cast<long long>(n), s.host_kv.size());
  }
  out->Set("general.type", GgufValue::String(kSlotType));
  out->Set("pi.slot.model_fingerprint", GgufValue::U64(layout.model_fingerprint));
  out->Set("pi.slot.cache_type_k", GgufValue::String(DTypeName(layout.k_type)));
  out->Set("pi.slot.cache_type_v", GgufValue::String(DTypeName(layout.v_type)));
  out->Set("pi.slot.n_batch", GgufValue::U32(static_cast<uint32_t>(layout.n_batch)));
  out->Set("pi.slot.kv_row_bytes", GgufValue::U64(static_cast<uint64_t>(layout.kv_row_bytes)));
  if (!layout.device.empty()) {
    out->Set("pi.slot.device", GgufValue::String(layout.device));
    out->Set("pi.slot.placement", GgufValue::U64(layout.placement));
    out->Set("pi.slot.device_kv_row_bytes",
             GgufValue::U64(static_cast<uint64_t>(layout.device_kv_row_bytes)));
  }
  PI_RETURN_IF_ERROR(out->AddTensor("tokens", DType::kI32, {n}, s.tokens.data()));
  PI_RETURN_IF_ERROR(out->AddTensor("dense", DType::kI8, {n}, s.dense.data()));
  PI_RETURN_IF_ERROR(
      out->AddTensor("kv", DType::kI8, {static_cast<int64_t>(s.host_kv.size())}, s.host_kv.data()));
  if (!state.device_kv.empty()) {
    PI_RETURN_IF_ERROR(out->AddTensor("device_kv", DType::kI8,
                                      {static_cast<int64_t>(state.device_kv.size())},
                                      state.device_kv.data()));
  }
  if (!state.logits.empty()) {
    PI_RETURN_IF_ERROR(
        out->AddTensor("logits", DType::kF32, {layout.n_vocab}, state.logits.data()));
  }
  return Status::Ok();
}

Status ReadSlotFile(const GgufFile& file, const SlotLayout& layout, SlotState* out) {
  PI_RETURN_IF_ERROR(CheckLayout(file, layout));
  for (const TensorInfo& t : file.tensors()) {
    if (t.name != "tokens" && t.name != "dense" && t.name != "kv" && t.name != "logits" &&
        t.name != "device_kv") {
      return Status::Invalid("slot file: unexpected tensor %s", t.name.c_str());
    }
  }
  const TensorInfo* tokens = file.FindTensor("tokens");
  if (!tokens) return Status::Invalid("slot file: no tokens tensor");
  const int64_t n = tokens->ne[0];
  if (tokens->n_dims != 1 || n < 1 || n > layout.n_ctx) {
    return Status::Invalid("slot file: %s tokens; this server's context holds 1 to %d",
                           tokens->ShapeString().c_str(), layout.n_ctx);
  }
  const TensorInfo *dense = nullptr, *kv = nullptr, *logits = nullptr;
  PI_RETURN_IF_ERROR(SlotTensor(file, "tokens", DType::kI32, n, &tokens));
  PI_RETURN_IF_ERROR(SlotTensor(file, "dense", DType::kI8, n, &dense));
  PI_RETURN_IF_ERROR(SlotTensor(file, "kv", DType::kI8, n * layout.kv_row_bytes, &kv));
  const TensorInfo* device_kv = nullptr;
  if (layout.device_kv_row_bytes > 0) {
    PI_RETURN_IF_ERROR(
        SlotTensor(file, "device_kv", DType::kI8, n * layout.device_kv_row_bytes, &device_kv));
  } else if (file.FindTensor("device_kv")) {
    return Status::Invalid("slot file: a device_kv tensor, and this server keeps no GPU layers");
  }
  if (file.FindTensor("logits")) {
    PI_RETURN_IF_ERROR(SlotTensor(file, "logits", DType::kF32, layout.n_vocab, &logits));
  }
  SlotState state;
  SavedSeq& s = state.seq;
  s.tokens.resize(static_cast<size_t>(n));
  std::memcpy(s.tokens.data(), tokens->data, s.tokens.size() * sizeof(int32_t));
  for (int32_t id : s.tokens) {
    if (id < 0 || id >= layout.n_vocab) {
      return Status::Invalid("slot file: token id %d is not below the vocabulary's %d", id,
                             layout.n_vocab);
    }
  }
  s.dense.assign(dense->data, dense->data + n);
  for (uint8_t d : s.dense) {
    if (d > 1) return Status::Invalid("slot file: a dense flag of %u (0 or 1)", d);
  }
  s.host_kv.assign(kv->data, kv->data + kv->nbytes);
  if (device_kv) state.device_kv.assign(device_kv->data, device_kv->data + device_kv->nbytes);
  if (logits) {
    state.logits.resize(static_cast<size_t>(layout.n_vocab));
    std::memcpy(state.logits.data(), logits->data, state.logits.size() * sizeof(float));
    for (float v : state.logits) {
      if (!std::isfinite(v) && v != -INFINITY) {
        return Status::Invalid("slot file: a logit that is not a number");
      }
    }
  }
  *out = std::move(state);
  return Status::Ok();
}

Status SaveSlot(Engine* engine, int seq, const std::vector<int32_t>& prompt, const float* logits,
                const std::string& path, int64_t* bytes) {
  if (prompt.empty()) return Status::Invalid("slot %d holds no prompt to save", seq);
  const SlotLayout layout = EngineSlotLayout(*engine);
  SlotState state;
  PI_RETURN_IF_ERROR(engine->SaveSeq(seq, static_cast<int>(prompt.size()), &state.seq));
  if (state.seq.tokens != prompt) {
    return Status::Internal("slot %d's cache does not hold the prompt it is said to", seq);
  }
  PI_RETURN_IF_ERROR(engine->ReadSavedDevicePart(state.seq, &state.device_kv));
  if (logits) state.logits.assign(logits, logits + engine->n_vocab());
  GgufWriter w;
  PI_RETURN_IF_ERROR(SerializeSlotFile(layout, state, &w));
  PI_RETURN_IF_ERROR(w.Write(path));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  *bytes = ec ? 0 : static_cast<int64_t>(size);
  return Status::Ok();
}

Status RestoreSlot(Engine* engine, int seq, const std::string& path, std::vector<int32_t>* prompt,
                   std::vector<float>* logits, int64_t* bytes) {
  std::unique_ptr<GgufFile> file;
  PI_RETURN_IF_ERROR(GgufFile::Read(path, &file));
  SlotState state;
  PI_RETURN_IF_ERROR(ReadSlotFile(*file, EngineSlotLayout(*engine), &state));
  PI_RETURN_IF_ERROR(engine->WriteSavedDevicePart(state.device_kv, &state.seq));
  PI_RETURN_IF_ERROR(engine->LoadSeq(seq, state.seq, state.seq.n()));
  *prompt = std::move(state.seq.tokens);
  *logits = std::move(state.logits);
  *bytes = static_cast<int64_t>(file->file_size());
  return Status::Ok();
}

}  // namespace pi
