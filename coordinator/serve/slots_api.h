// llama-server's slot actions: POST /slots/{id}?action=save|restore|erase.
// save writes the prompt slot {id}'s KV cache holds to a file of
// --slot-save-path ({"filename": "name"}), restore reads one into the slot
// (a request whose prompt goes on from it then starts after it), erase
// forgets what the slot holds. Each is a job on the engine's scheduler that
// runs when its slot is free (slot_file.h says what a file holds and where
// it loads). Filenames are plain names: no directories, nothing hidden.
#pragma once

#include <functional>
#include <string>

#include "common/base/status.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/http_routes.h"

namespace pi {

inline constexpr char kSlotsPrefix[] = "/slots/";
inline constexpr size_t kMaxSlotFilename = 128;

// Checks a slot file's name: 1 to kMaxSlotFilename of A-Z a-z 0-9 . _ -,
// not starting with a dot.
Status CheckSlotFilename(const std::string& name);

// Reads the route's id (the path after /slots/), the query (action=...;
// any other parameter is refused by name) and the body; the job submitted,
// or *out's refusal (400, 501 without --slot-save-path for save and restore).
void StartSlotAction(const HttpContext& c, const std::string& query, const std::string& body,
                     std::function<void()> notify, CompletionStart* out);

// A finished slot action's reply (llama-server's fields): id_slot,
// filename, n_saved / n_restored, n_written / n_read and timings' save_ms /
// restore_ms; for erase id_slot and n_erased.
std::string SlotActionJson(SlotOp op, int id_slot, const std::string& filename,
                           const GenerationResult& result);

}  // namespace pi
