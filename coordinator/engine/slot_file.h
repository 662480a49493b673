// Slot files: a sequence's cached prompt kept on disk (llama-server's
// POST /slots/{id}?action=save|restore and --slot-save-path), so a long
// system prompt or a conversation survives a restart or moves to another
// slot. A slot file is a GGUF file (the container's reader is fuzzed and
// checks every size before it is used) holding the prompt's tokens, the
// keys and values of its positions as the prompt's evaluation wrote them,
// and, when kept, the logits after its last token. It loads only into an
// engine of the same model (its fingerprint), KV cache types and prompt
// chunking (-b), since a prompt cache's answers must be those of an
// uncached run (prompt_cache.h). On the device path the file also holds
// the device's layers' part, in the device's layout (DeviceBackend::
// KeptLayout), and loads only where the same layers and hot neurons are
// on a device of that layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/format/gguf.h"
#include "coordinator/engine/saved_seq.h"

namespace pi {

class Engine;

// What a scheduler does with a sequence instead of a generation.
enum class SlotOp { kNone, kSave, kRestore, kErase };
const char* SlotOpName(SlotOp op);  // "save", "restore", "erase" ("" for kNone)

// What a slot file must match to load: the engine's.
struct SlotLayout {
  uint64_t model_fingerprint = 0;
  DType k_type = DType::kF16, v_type = DType::kF16;
  int n_batch = 0;           // where prompts are cut into runs (-b)
  int n_ctx = 0;             // the most positions a sequence holds
  int n_vocab = 0;           // token ids below it; the logits' length
  int64_t kv_row_bytes = 0;  // the host's layers' cache bytes per position
  // With a device ("" and 0 without): its KeptLayout ("cuda[0,12)"), a hash
  // of its plan's hot neurons and head, its kept bytes per position.
  std::string device;
  uint64_t placement = 0;
  int64_t device_kv_row_bytes = 0;
};
SlotLayout EngineSlotLayout(const Engine& engine);

// A slot file's contents.
struct SlotState {
  SavedSeq seq;                    // host_kv, tokens, dense (its device part: below)
  std::vector<uint8_t> device_kv;  // the device's part, as bytes (Engine::ReadSavedDevicePart)
  std::vector<float> logits;       // [n_vocab] after the last token; empty: not kept
};

// The file's bytes: `state` (1 to n_ctx positions) under `layout`.
Status SerializeSlotFile(const SlotLayout& layout, const SlotState& state, GgufWriter* out);
// A slot file read back, checked against `layout`: every tensor's type and
// shape, the token ids, the KV bytes per position; the error names what differs.
Status ReadSlotFile(const GgufFile& file, const SlotLayout& layout, SlotState* out);

// Sequence `seq`'s first prompt.size() positions (which hold `prompt` as
// its evaluation wrote them) and `logits` (n_vocab, or null) written to
// `path` (atomically: an old file stays whole until the new one is); its
// size in *bytes.
Status SaveSlot(Engine* engine, int seq, const std::vector<int32_t>& prompt, const float* logits,
                const std::string& path, int64_t* bytes);
// The slot file at `path` into sequence `seq` (which then holds its
// prompt); its prompt, logits (empty: not kept) and size out. On failure
// the sequence is unchanged.
Status RestoreSlot(Engine* engine, int seq, const std::string& path, std::vector<int32_t>* prompt,
                   std::vector<float>* logits, int64_t* bytes);

}  // namespace pi
