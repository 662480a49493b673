// PredictorSamples: what pi-train-predictor learns from — for every layer
// and collected token, the predictor's input h (FfnObserver::OnFfnInput) and
// which FFN neurons fired (OnFfn).
//
// Sized for big models: h is kept as f16 (half the bytes; a predictor's
// input needs no more) in one file-backed mapping, the file unlinked as soon
// as it is made, so the page cache — not the process heap — holds what RAM
// can and the rest stays on disk. A 7B model's 20k tokens take ~5 GB there
// instead of ~11 GB of f32 in memory. The file's space is reserved up front,
// so a full disk is an error at Init, never a crash while collecting.
//
//   per layer l:  h    [capacity][n_embd]  f16
//                 mask [capacity][words]   uint64, bit i = neuron i fired
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/compute/ffn_observer.h"

namespace pi {

class PredictorSamples : public FfnObserver {
 public:
  PredictorSamples() = default;
  ~PredictorSamples() override;
  PredictorSamples(const PredictorSamples&) = delete;
  PredictorSamples& operator=(const PredictorSamples&) = delete;

  // Bytes Init reserves for `capacity` tokens.
  static int64_t Bytes(int n_layer, int n_embd, int n_ff, int64_t capacity);

  // Room for `capacity` tokens. The backing file is made in directory `dir`
  // (its space reserved, then unlinked); an empty `dir` means anonymous
  // memory instead.
  Status Init(int n_layer, int n_embd, int n_ff, int64_t capacity, const std::string& dir);

  // FfnObserver: records batches until `capacity` tokens are in; later
  // tokens are dropped (the caller sizes the collection).
  void OnFfnInput(int layer, int batch, const float* h) override;
  void OnFfn(int layer, int batch, const float* act) override;

  int n_embd() const { return d_; }
  int n_ff() const { return ff_; }
  // Tokens recorded with both their input and their mask in every layer.
  int64_t n_tokens() const;
  // out[0, n_embd) = layer's input for token t, as f32.
  void Input(int layer, int64_t t, float* out) const;
  bool fired(int layer, int64_t t, int i) const { return (Mask(layer, t)[i / 64] >> (i % 64)) & 1; }
  // Token t's firing bits: bit i % 64 of word i / 64 is neuron i.
  const uint64_t* fired_mask(int layer, int64_t t) const { return Mask(layer, t); }

 private:
  uint16_t* H(int layer, int64_t t) const;
  uint64_t* Mask(int layer, int64_t t) const;

  int n_layer_ = 0, d_ = 0, ff_ = 0, words_ = 0;
  int64_t capacity_ = 0;
  int64_t layer_bytes_ = 0;
  uint8_t* base_ = nullptr;
  size_t mapped_ = 0;
  std::vector<int64_t> n_h_;     // [n_layer] tokens with h recorded
  std::vector<int64_t> n_mask_;  // [n_layer] tokens with a mask recorded
};

}  // namespace pi
