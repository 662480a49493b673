#include "coordinator/route/device_chain.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace pi {

Status DeviceChain::Init(const LlamaModel& model, std::vector<DeviceBackend*> members) {
  if (members.empty()) return Status::Error("a device chain of no devices");
  config_ = &model.config;
  const DevicePlan& p0 = members[0]->plan();
  plan_ = DevicePlan();
  plan_.hot.assign(model.config.n_layer, {});
  plan_.n_ctx = p0.n_ctx;
  plan_.n_seq = p0.n_seq;
  plan_.cache_type_k = p0.cache_type_k;
  plan_.cache_type_v = p0.cache_type_v;
  plan_.mode = p0.mode;
  plan_.threshold = p0.threshold;
  plan_.gate_thresholds = p0.gate_thresholds;
  for (int k = 0; k < kProjectionInputs; ++k) plan_.input_thresholds[k] = p0.input_thresholds[k];
  runs_.clear();
  head_ = -1;
  name_.clear();
  for (size_t k = 0; k < members.size(); ++k) {
    const DevicePlan& p = members[k]->plan();
    const std::string who = "device " + std::to_string(k) + " (" + members[k]->name() + ")";
    if (p.hot.size() != plan_.hot.size()) {
      return Status::Error("%s: a plan for %zu layers, the model has %zu", who.c_str(),
                           p.hot.size(), plan_.hot.size());
    }
    if (p.n_layers > p.first_layer) {
      if (p.first_layer != plan_.n_layers) {
        return Status::Error("%s holds layers %d..%d; the chain's next layer is %d", who.c_str(),
                             p.first_layer, p.n_layers - 1, plan_.n_layers);
      }
      plan_.n_layers = p.n_layers;
      runs_.push_back(static_cast<int>(k));
      for (int il = p.first_layer; il < p.n_layers; ++il) plan_.hot[il] = p.hot[il];
    } else if (!p.output) {
      return Status::Error("%s holds no layer and not the head", who.c_str());
    }
    if (p.output) {
      if (head_ >= 0) return Status::Error("%s holds the head too", who.c_str());
      head_ = static_cast<int>(k);
    }
    if (p.cache_type_k != plan_.cache_type_k || p.cache_type_v != plan_.cache_type_v ||
        p.mode != plan_.mode || p.threshold != plan_.threshold ||
        p.gate_thresholds != plan_.gate_thresholds ||
        !std::equal(std::begin(p.input_thresholds), std::end(p.input_thresholds),
                    std::begin(plan_.input_thresholds))) {
      return Status::Error("%s was loaded with other cache types or sparse settings", who.c_str());
    }
    plan_.n_ctx = std::min(plan_.n_ctx, p.n_ctx);
    plan_.n_seq = std::min(plan_.n_seq, p.n_seq);
    name_ += (k ? " + " : "") + std::string(members[k]->name());
  }
  plan_.output = head_ >= 0;
  members_ = std::move(members);
  h_.assign(model.config.n_embd, 0.0f);
  failed_ = -1;
  return Status::Ok();
}

Status DeviceChain::Fail(int k, const Status& s) {
  failed_ = k;
  return s;
}

void DeviceChain::BeginToken(const float* h, int seq, int pos, bool dense) {
  seq_ = seq;
  pos_ = pos;
  dense_ = dense;
  current_ = 0;
  fired_ = 0;
  if (!runs_.empty()) members_[runs_[0]]->BeginToken(h, seq, pos, dense);
}

Status DeviceChain::NextMember() {
  const int k = runs_[current_];
  int64_t fired = 0;
  Status s = members_[k]->FinishToken(h_.data(), nullptr, &fired);
  if (!s.ok()) return Fail(k, s);
  fired_ += fired;
  ++current_;
  members_[runs_[current_]]->BeginToken(h_.data(), seq_, pos_, dense_);
  return Status::Ok();
}

Status DeviceChain::RunLayer(int il, ColdStep* cold) {
  if (il < 0 || il >= plan_.n_layers) {
    return Status::Error("device chain: layer %d is not on a device", il);
  }
  while (il >= members_[runs_[current_]]->plan().n_layers) PI_RETURN_IF_ERROR(NextMember());
  const int k = runs_[current_];
  const Status s = members_[k]->RunLayer(il, cold);
  return s.ok() ? s : Fail(k, s);
}

Status DeviceChain::FinishToken(float* h_out, float* logits, int64_t* hot_fired) {
  if (runs_.empty()) return Status::Error("device chain: no layers to finish");
  const int k = runs_[current_];
  int64_t fired = 0;
  if (logits && k != head_) {  // the head is on another device: h goes there
    if (head_ < 0) return Status::Error("device chain: no device holds the head");
    Status s = members_[k]->FinishToken(h_.data(), nullptr, &fired);
    if (!s.ok()) return Fail(k, s);
    if (h_out) std::memcpy(h_out, h_.data(), sizeof(float) * h_.size());
    s = members_[head_]->Head(h_.data(), logits);
    if (!s.ok()) return Fail(head_, s);
  } else {
    const Status s = members_[k]->FinishToken(h_out, logits, &fired);
    if (!s.ok()) return Fail(k, s);
  }
  fired_ += fired;
  if (hot_fired) *hot_fired = fired_;
  return Status::Ok();
}

Status DeviceChain::Head(const float* h, float* logits) {
  if (head_ < 0) return Status::Error("device chain: no device holds the head");
  const Status s = members_[head_]->Head(h, logits);
  return s.ok() ? s : Fail(head_, s);
}

Status DeviceChain::CopySeq(int src, int dst, int n) {
  for (int k : runs_) PI_RETURN_IF_ERROR(members_[k]->CopySeq(src, dst, n));
  return Status::Ok();
}

Status DeviceChain::SaveSeq(int seq, int n, uint64_t key) {
  for (size_t i = 0; i < runs_.size(); ++i) {
    const Status s = members_[runs_[i]]->SaveSeq(seq, n, key);
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) (void)members_[runs_[j]]->DropSeq(key);
      return s;
    }
  }
  return Status::Ok();
}

Status DeviceChain::LoadSeq(uint64_t key, int seq, int n) {
  for (int k : runs_) PI_RETURN_IF_ERROR(members_[k]->LoadSeq(key, seq, n));
  return Status::Ok();
}

Status DeviceChain::DropSeq(uint64_t key) {
  Status first = Status::Ok();
  for (int k : runs_) {
    const Status s = members_[k]->DropSeq(key);
    if (first.ok()) first = s;
  }
  return first;
}

template <typename Fn>
Status DeviceChain::ForKeptParts(int n, int64_t offset, int64_t size, Fn fn) {
  int64_t total = 0;
  for (int k : runs_) total += SavedSeqBytes(*config_, members_[k]->plan(), n);
  if (offset < 0 || size < 0 || offset > total || size > total - offset) {
    return Status::Invalid("device chain: bytes [%lld, +%lld) of the %lld kept for %d positions",
                           static_cast<long long>(offset), static_cast<long long>(size),
                           static_cast<long long>(total), n);
  }
  int64_t start = 0;  // the member's part's first byte in the chain's
  for (int k : runs_) {
    const int64_t part = SavedSeqBytes(*config_, members_[k]->plan(), n);
    const int64_t from = std::max(offset, start), to = std::min(offset + size, start + part);
    if (from < to || total == 0) {  // (no positions: each member makes its empty entry)
      PI_RETURN_IF_ERROR(
          fn(members_[k], from - start, std::max<int64_t>(to - from, 0), from - offset));
    }
    start += part;
  }
  return Status::Ok();
}

Status DeviceChain::ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) {
  return ForKeptParts(n, offset, size, [&](DeviceBackend* d, int64_t at, int64_t len, int64_t to) {
    return d->ReadKept(key, n, at, len, out + to);
  });
}

Status DeviceChain::WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data,
                              int64_t size) {
  return ForKeptParts(n, offset, size,
                      [&](DeviceBackend* d, int64_t at, int64_t len, int64_t from) {
                        return d->WriteKept(key, n, at, data + from, len);
                      });
}

std::string DeviceChain::KeptLayout() const {
  std::string layout;
  for (int k : runs_) layout += (layout.empty() ? "" : "+") + members_[k]->KeptLayout();
  return layout;
}

Status DeviceChain::Recover() {
  for (size_t k = 0; k < members_.size(); ++k) {
    if (failed_ >= 0 && static_cast<int>(k) != failed_) continue;
    PI_RETURN_IF_ERROR(members_[k]->Recover());
  }
  failed_ = -1;
  return Status::Ok();
}

int64_t DeviceChain::resident_bytes() const {
  int64_t n = 0;
  for (const DeviceBackend* m : members_) n += m->resident_bytes();
  return n;
}

int64_t DeviceChain::device_bytes() const {
  int64_t n = 0;
  for (const DeviceBackend* m : members_) n += m->device_bytes();
  return n;
}

}  // namespace pi
