// pi-train-predictor: trains PowerInfer's per-layer activation predictors for a
// ReLU-family model and writes a PowerInfer GGUF ("PWRI") that runs with
// --sparse predictor.
//
//   pi-train-predictor -m model.gguf -f corpus.txt -o model.powerinfer.gguf
//
// 1. Runs the model densely over the text and records, per layer and token,
//    the FFN input h (the residual after attention, before the FFN norm:
//    what PowerInfer's predictor reads) and which neurons fired (act != 0).
// 2. Trains per layer fc2 · relu(fc1 · h) (no biases) with Adam on a binary
//    cross-entropy whose positive term is weighted (--pos-weight): a missed
//    neuron corrupts the output, an extra one only costs time. The last
//    --holdout of the tokens (a contiguous tail, so neighbouring tokens do
//    not leak across) is held out; training stops when the held-out loss has
//    not improved for --patience epochs and keeps the best weights. Layers
//    train in parallel on the thread pool, each on one thread (so results do
//    not depend on -t).
// 3. Calibrates on the held-out tokens: layer l needs threshold t_l for its
//    recall to reach --target-recall + --margin (the margin covers the gap
//    between held-out and unseen text). The file has one threshold key, so
//    when all t_l have the same sign each layer's fc2 is scaled by
//    |t| / |t_l| (a positive scale: the predicted set at t is exactly layer
//    l's set at t_l) and t = +-1 is written; otherwise (or with
//    --shared-threshold) t = min_l t_l, which gives every layer recall >=
//    target at some cost in sparsity. Every layer, not the mean, must reach
//    the target: one layer's misses corrupt all the layers after it.
// 4. Writes every tensor and key of the model, plus blk.N.fc1.weight
//    [n_embd, rank] and blk.N.fc2.weight [rank, n_ff] (F16, or F32 / Q8_0
//    with --predictor-type), ffn_down replaced by its transpose ffn_down_t, the PWRI magic,
//    powerinfer.sparse_threshold and pi.ffn_activation.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/activation_flag.h"
#include "cli/args.h"
#include "cli/corpus.h"
#include "cli/tool_main.h"
#include "common/base/progress.h"
#include "common/base/thread_pool.h"
#include "common/format/gguf.h"
#include "common/format/transpose_tensor.h"
#include "common/model/llama_model.h"
#include "common/offline/predictor_samples.h"
#include "common/offline/predictor_training.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "kernels/cpu/quant.h"

namespace {

// The smallest corpus worth training on: enough tokens to fit a low-rank
// predictor, and enough held-out tokens that recall (a share of their
// firings) is measured to about a point.
constexpr int64_t kMinTrainTokens = 200;
constexpr int64_t kMinHeldOutTokens = 50;

void Usage() {
  fprintf(stderr,
          "usage: pi-train-predictor -m MODEL -f TEXT -o OUT.gguf [options]\n"
          "  -m, --model FILE        ReLU-family GGUF model (relu or drelu FFN)\n"
          "  -f, --file PATH         training text: a file, or a folder (all *.txt in it, sorted)\n"
          "  -o, --output FILE       PowerInfer GGUF to write (model + predictors)\n"
          "  --rank N                predictor hidden size, every layer (default: per layer,\n"
          "                          half the mean number of firing neurons, in [32, n_embd/2])\n"
          "  --ranks R0,R1,...       per-layer hidden sizes (one per layer)\n"
          "  --max-tokens N          tokens to collect (default 20000; at least 200 to train\n"
          "                          on and 50 held out)\n"
          "  -c, --ctx-size N        chunk context while collecting (default 256)\n"
          "  --epochs N              at most N epochs (default 30)\n"
          "  --patience N            stop after N epochs without held-out improvement (default 3)\n"
          "  --lr X                  Adam learning rate (default 0.002)\n"
          "  --batch N               mini-batch (default 128)\n"
          "  --pos-weight X          weight of the firing class in the loss (default 4)\n"
          "  --holdout X             held-out fraction, the tail of the text (default 0.1)\n"
          "  --target-recall X       recall every layer should reach on new text (default 0.95)\n"
          "  --margin X              calibrate for recall target + X on the held-out tokens\n"
          "                          (default 0.03: recall on unseen text runs 1-3 points lower)\n"
          "  --shared-threshold      one threshold for all layers (no per-layer calibration)\n"
          "  --predictor-type T      fc1/fc2 as f16 (default), f32 or q8_0 (q8_0: about half of\n"
          "                          f16's bytes; ranks become multiples of 32)\n"
          "  --f32                   same as --predictor-type f32\n"
          "  --seed N                (default 1)\n"
          "  -t, --threads N         threads (default: %u)\n",
          std::max(1u, std::thread::hardware_concurrency()));
  fputs(pi::kFfnActivationUsage, stderr);
}

// The samples' backing file goes next to the output (where the user expects
// disk to be used), not to /tmp, which may be a RAM disk.
std::string SampleDir(const std::string& out_path) {
  const size_t slash = out_path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : out_path.substr(0, slash);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool ParseRanks(const std::string& s, std::vector<int>* out) {
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 65536) return false;
    out->push_back(static_cast<int>(v));
  }
  return !out->empty();
}

// What the flags ask for.
struct Options {
  std::string ffn_activation;  // --ffn-activation
  std::string model_path, text_path, out_path;
  int rank = 0;  // 0: per layer, from the collected firing rates
  std::vector<int> ranks;
  int64_t max_tokens = 20000;
  int n_ctx = 256;
  double holdout = 0.1, target = 0.95, margin = 0.03;
  bool shared_threshold = false;
  std::string predictor_type = "f16";
  pi::DType wtype = pi::DType::kF16;
  pi::PredictorTrainParams tp;
  int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // fc2's rows have `rank` weights: whole Q8_0 blocks need multiples of 32.
  int rank_step() const { return wtype == pi::DType::kQ8_0 ? 32 : 16; }
};

bool ParseFlag(const std::string& f, pi::ArgReader* args, Options* o) {
  pi::PredictorTrainParams& tp = o->tp;
  if (f == "-m" || f == "--model")
    o->model_path = args->String(f);
  else if (f == "-f" || f == "--file")
    o->text_path = args->String(f);
  else if (f == "-o" || f == "--output")
    o->out_path = args->String(f);
  else if (f == "--rank")
    o->rank = args->Int(f);
  else if (f == "--ranks") {
    const std::string v = args->String(f);
    if (!args->failed() && !ParseRanks(v, &o->ranks))
      args->Fail("--ranks expects comma-separated sizes >= 1, got '" + v + "'");
  } else if (f == "--max-tokens")
    o->max_tokens = args->Int64(f);
  else if (f == "-c" || f == "--ctx-size")
    o->n_ctx = args->Int(f);
  else if (f == "--epochs")
    tp.epochs = args->Int(f);
  else if (f == "--patience")
    tp.patience = args->Int(f);
  else if (f == "--lr")
    tp.lr = args->Float(f);
  else if (f == "--batch")
    tp.batch = args->Int(f);
  else if (f == "--pos-weight")
    tp.pos_weight = args->Float(f);
  else if (f == "--holdout")
    o->holdout = args->Float(f);
  else if (f == "--target-recall")
    o->target = args->Float(f);
  else if (f == "--margin")
    o->margin = args->Float(f);
  else if (f == "--shared-threshold")
    o->shared_threshold = true;
  else if (f == "--f32")
    o->predictor_type = "f32";
  else if (f == "--predictor-type")
    o->predictor_type = args->String(f);
  else if (f == "--seed")
    tp.seed = static_cast<uint64_t>(args->Int64(f));
  else if (f == "-t" || f == "--threads")
    o->n_threads = args->Int(f);
  else
    return pi::ParseFfnActivationFlag(f, args, &o->ffn_activation);
  return true;
}

// Reads and checks the flags: -1 to go on, else the exit status.
int ParseOptions(int argc, char** argv, Options* o) {
  pi::ArgReader args("pi-train-predictor", argc, argv);
  const int flags_rc =
      args.ReadFlags([&](const std::string& f) { return ParseFlag(f, &args, o); }, Usage);
  if (flags_rc >= 0) return flags_rc;
  if (o->model_path.empty() || o->text_path.empty() || o->out_path.empty()) {
    fprintf(stderr, "pi-train-predictor: -m MODEL, -f TEXT and -o OUT are required (see --help)\n");
    return 2;
  }
  const pi::PredictorTrainParams& tp = o->tp;
  if (o->rank < 0 || o->rank > 65536 || o->max_tokens < 16 || o->n_ctx < 2 || tp.epochs < 1 ||
      tp.patience < 1 || !(tp.lr > 0) || tp.batch < 1 || tp.batch > 4096 || !(tp.pos_weight > 0) ||
      !(o->holdout > 0 && o->holdout < 1) || !(o->target > 0 && o->target <= 1) ||
      !(o->margin >= 0 && o->margin < 1) || o->n_threads < 1 || o->n_threads > 512) {
    fprintf(stderr,
            "pi-train-predictor: invalid option: need --rank >= 1, --max-tokens >= 16, -c >= 2, "
            "--epochs/--patience/--batch/-t >= 1, --lr/--pos-weight > 0, 0 < --holdout < 1, "
            "0 < --target-recall <= 1\n");
    return 2;
  }
  if (o->predictor_type == "f32") {
    o->wtype = pi::DType::kF32;
  } else if (o->predictor_type == "q8_0") {
    o->wtype = pi::DType::kQ8_0;
  } else if (o->predictor_type != "f16") {
    fprintf(stderr, "pi-train-predictor: --predictor-type %s: expected f16, f32 or q8_0\n",
            o->predictor_type.c_str());
    return 2;
  }
  return -1;
}

// What the model must be for the options: a ReLU-family FFN (something to
// predict), one rank per layer, ranks and n_embd the predictor type can hold.
// -1 to go on, else the exit status (the reason printed).
int CheckModel(const pi::LlamaModel& model, Options* o) {
  const pi::LlamaConfig& c = model.config;
  if (!pi::FfnIsReluFamily(c.activation)) {
    fprintf(stderr,
            "pi-train-predictor: %s uses %s, whose activations are never exactly zero: there "
            "is nothing to predict (a relu or drelu model is needed)\n",
            o->model_path.c_str(), pi::FfnActivationName(c.activation));
    return 1;
  }
  // The file's own predictors are replaced, not kept beside the new ones: say so.
  int had = 0;
  for (const pi::LlamaLayer& l : model.layers) had += l.fc1.present() && l.fc2.present();
  if (had > 0) {
    fprintf(stderr,
            "pi-train-predictor: note: %s already has predictors for %d of %d layers; %s gets "
            "newly trained ones in their place\n",
            o->model_path.c_str(), had, c.n_layer, o->out_path.c_str());
  }
  if (o->ranks.empty() && o->rank > 0) o->ranks.assign(c.n_layer, o->rank);
  if (!o->ranks.empty() && static_cast<int>(o->ranks.size()) != c.n_layer) {
    fprintf(stderr, "pi-train-predictor: --ranks gives %zu sizes for %d layers\n", o->ranks.size(),
            c.n_layer);
    return 2;
  }
  for (int r : o->ranks) {
    if (r % o->rank_step() != 0) {
      fprintf(stderr,
              "pi-train-predictor: rank %d: %s predictors need ranks that are multiples "
              "of %d\n",
              r, o->predictor_type.c_str(), o->rank_step());
      return 2;
    }
  }
  if (c.n_embd % 32 != 0 && o->wtype == pi::DType::kQ8_0) {
    fprintf(stderr, "pi-train-predictor: q8_0 predictors need n_embd %% 32 == 0 (n_embd %d)\n",
            c.n_embd);
    return 2;
  }
  return -1;
}

// 1. Collect: runs the model densely over the text, recording every
// position's FFN input and firings. -1 to go on, else the exit status.
int Collect(const Options& o, const pi::LlamaModel& model, const pi::Tokenizer& tok,
            const std::vector<int32_t>& tokens, pi::PredictorSamples* data) {
  const pi::LlamaConfig& c = model.config;
  pi::EngineOptions opt;
  opt.n_threads = o.n_threads;
  opt.n_ctx = std::min(o.n_ctx, c.n_ctx_train > 0 ? c.n_ctx_train : o.n_ctx);
  std::unique_ptr<pi::Engine> engine;
  pi::CorpusChunks chunks;
  pi::Status s = pi::Engine::Create(&model, opt, &engine);
  if (s.ok()) {
    s = pi::CorpusChunks::Make(&tokens, engine->n_ctx(), tok.add_bos_token() ? tok.bos() : -1,
                               o.max_tokens, &chunks);
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  const int64_t total = chunks.positions();
  const int64_t n_train_planned =
      std::max<int64_t>(1, static_cast<int64_t>(total * (1.0 - o.holdout)));
  if (n_train_planned < kMinTrainTokens || total - n_train_planned < kMinHeldOutTokens) {
    fprintf(stderr,
            "pi-train-predictor: '%s' gives %lld tokens (--max-tokens %lld, --holdout %.3g): %lld "
            "to train on and %lld held out; training needs at least %lld and measuring recall at "
            "least %lld held out (a longer text, or a larger --max-tokens or --holdout)\n",
            o.text_path.c_str(), static_cast<long long>(total),
            static_cast<long long>(o.max_tokens), o.holdout,
            static_cast<long long>(n_train_planned),
            static_cast<long long>(total - n_train_planned),
            static_cast<long long>(kMinTrainTokens), static_cast<long long>(kMinHeldOutTokens));
    return 1;
  }
  fprintf(stderr,
          "pi-train-predictor: %s (%d layers, n_embd %d, n_ff %d, %s), collecting %lld tokens "
          "of %s (%.0f MiB of samples, f16, file-backed in %s), %d threads\n",
          o.model_path.c_str(), c.n_layer, c.n_embd, c.n_ff, pi::FfnActivationName(c.activation),
          static_cast<long long>(total), o.text_path.c_str(),
          pi::PredictorSamples::Bytes(c.n_layer, c.n_embd, c.n_ff, total) / 1048576.0,
          SampleDir(o.out_path).c_str(), o.n_threads);
  s = data->Init(c.n_layer, c.n_embd, c.n_ff, total, SampleDir(o.out_path));
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  engine->SetFfnObserver(data);
  pi::ProgressBar bar("collect", total, "tok");
  s = chunks.Eval(engine.get(), opt.n_batch, &bar);
  if (!s.ok()) {
    fprintf(stderr, "\npi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  bar.Finish();
  return -1;
}

// Adaptive ranks (PowerInfer sizes its predictors per layer too): a layer
// whose tokens fire k neurons on average gets rank k / 2, rounded up to a
// multiple of 16 (32 for q8_0) and kept in [32, n_embd / 2]. Denser layers need a finer
// predictor, and each predictor weight costs about as much to read as the
// FFN rows a better prediction saves.
std::vector<int> AdaptiveRanks(const pi::PredictorSamples& data, int64_t n_train,
                               const pi::LlamaConfig& c, int rank_step) {
  std::vector<int> ranks;
  for (int l = 0; l < c.n_layer; ++l) {
    int64_t fired = 0;
    for (int64_t t = 0; t < n_train; ++t) {
      for (int i = 0; i < c.n_ff; ++i) fired += data.fired(l, t, i);
    }
    const double k = static_cast<double>(fired) / n_train;
    const int r = rank_step * static_cast<int>(std::ceil(k / 2 / rank_step));
    const int cap = std::max(32, c.n_embd / 2 / rank_step * rank_step);
    ranks.push_back(std::max(32, std::min(r, cap)));
  }
  return ranks;
}

// 2. Trains every layer's predictor, one layer per pool task.
void TrainLayers(const Options& o, const pi::PredictorSamples& data, int64_t n_train, int n_layer,
                 pi::ThreadPool* pool, std::vector<pi::LayerPredictor>* preds) {
  const pi::PredictorTrainParams& tp = o.tp;
  fprintf(
      stderr,
      "pi-train-predictor: training %d layers on %lld tokens (%lld held out), ranks %d..%d, "
      "batch %d, lr %g, pos-weight %g, at most %d epochs\n",
      n_layer, static_cast<long long>(n_train), static_cast<long long>(data.n_tokens() - n_train),
      *std::min_element(o.ranks.begin(), o.ranks.end()),
      *std::max_element(o.ranks.begin(), o.ranks.end()), tp.batch, tp.lr, tp.pos_weight, tp.epochs);
  preds->assign(n_layer, pi::LayerPredictor());
  for (int l = 0; l < n_layer; ++l) (*preds)[l].rank = o.ranks[l];
  std::mutex print_mu;
  std::atomic<int64_t> epochs_done{0};
  const double t_start = pi::NowSeconds();
  pool->ParallelFor(n_layer, [&](int64_t l, int) {
    pi::TrainLayerPredictor(
        data, static_cast<int>(l), n_train, data.n_tokens(), tp, &(*preds)[l],
        [&](int epoch, double train_loss, double val, bool best) {
          const int64_t done = ++epochs_done;
          const double el = pi::NowSeconds() - t_start;
          const double eta = el / done * (static_cast<double>(n_layer) * tp.epochs - done);
          std::lock_guard<std::mutex> lock(print_mu);
          fprintf(stderr,
                  "  layer %2lld epoch %2d/%d  train loss %.4f  held-out %.4f%s  [%.0f s, ETA <= "
                  "%.0f s]\n",
                  static_cast<long long>(l), epoch, tp.epochs, train_loss, val, best ? " *" : "",
                  el, eta);
        });
  });
  fprintf(stderr, "pi-train-predictor: trained in %.1f s\n", pi::NowSeconds() - t_start);
}

// The final weights, their held-out scores and the one threshold the file holds.
struct Calibration {
  float threshold = 0.0f;
  bool per_layer = false;  // each layer's threshold folded into its fc2
  std::vector<std::vector<float>> w1, w2, scores;
};

// 3. Calibrates on the held-out tail, layers in parallel.
Calibration Calibrate(const Options& o, const pi::PredictorSamples& data,
                      const std::vector<pi::LayerPredictor>& preds, int64_t n_train,
                      const pi::LlamaConfig& c, pi::ThreadPool* pool) {
  const int64_t n_hold = data.n_tokens() - n_train;
  const double cal_target = std::min(1.0, o.target + o.margin);
  Calibration cal;
  cal.w1.resize(c.n_layer);
  cal.w2.resize(c.n_layer);
  cal.scores.resize(c.n_layer);
  std::vector<float> t_layer(c.n_layer);
  // Scores of layer l's held-out tokens with fc2 scaled by `fc2_scale`, and
  // the largest threshold meeting the calibration target on them.
  auto score_layer = [&](int l, float fc2_scale) {
    pi::FinalPredictorWeights(preds[l], c.n_embd, c.n_ff, o.wtype, fc2_scale, &cal.w1[l],
                              &cal.w2[l]);
    pi::PredictorScores(data, l, n_train, n_hold, c.n_embd, c.n_ff, cal.w1[l], cal.w2[l],
                        preds[l].rank, &cal.scores[l]);
    t_layer[l] =
        pi::ThresholdForRecall(data, l, n_train, n_hold, c.n_ff, cal.scores[l], cal_target);
  };
  pool->ParallelFor(c.n_layer, [&](int64_t l, int) { score_layer(static_cast<int>(l), 1.0f); });
  bool all_neg = true, all_pos = true;
  for (float t : t_layer) {
    all_neg &= t < 0 && std::isfinite(t);
    all_pos &= t > 0 && std::isfinite(t);
  }
  cal.per_layer = !o.shared_threshold && (all_neg || all_pos);
  if (cal.per_layer) {
    cal.threshold = all_neg ? -1.0f : 1.0f;
    std::vector<float> fc2_scale(c.n_layer);
    for (int l = 0; l < c.n_layer; ++l) fc2_scale[l] = 1.0f / std::fabs(t_layer[l]);
    pool->ParallelFor(c.n_layer,
                      [&](int64_t l, int) { score_layer(static_cast<int>(l), fc2_scale[l]); });
    // Rounding the scaled weights to F16 moves scores slightly: nudge the
    // threshold down until every layer meets the target again.
    for (int l = 0; l < c.n_layer; ++l) cal.threshold = std::min(cal.threshold, t_layer[l]);
  } else {
    cal.threshold = *std::min_element(t_layer.begin(), t_layer.end());
    if (!std::isfinite(cal.threshold)) cal.threshold = 0.0f;
  }
  return cal;
}

// Per layer: recall, precision and sparsity on the held-out tokens.
void PrintQuality(const Options& o, const pi::PredictorSamples& data,
                  const std::vector<pi::LayerPredictor>& preds, const Calibration& cal,
                  int64_t n_train, int n_ff) {
  const int n_layer = static_cast<int>(preds.size());
  const int64_t n_hold = data.n_tokens() - n_train;
  printf(
      "predictor quality on the %lld held-out tokens at threshold %g (recall target %.3g + "
      "margin %.3g; %s):\n",
      static_cast<long long>(n_hold), cal.threshold, o.target, o.margin,
      cal.per_layer ? "per-layer calibration folded into fc2" : "one shared threshold");
  printf(
      "layer  rank  epochs  recall (95%% interval, firings)  precision  pred.sparsity  true "
      "sparsity\n");
  double mean_recall = 0, mean_pred_sp = 0, mean_true_sp = 0;
  for (int l = 0; l < n_layer; ++l) {
    const pi::PredictorQuality q =
        pi::MeasurePredictor(data, l, n_train, n_hold, n_ff, cal.scores[l], cal.threshold);
    mean_recall += q.recall / n_layer;
    mean_pred_sp += q.predicted_sparsity / n_layer;
    mean_true_sp += q.true_sparsity / n_layer;
    printf("%5d  %4d  %6d  %6.4f +- %.4f %12lld  %9.4f  %12.2f%%  %12.2f%%\n", l, preds[l].rank,
           preds[l].epochs_run, q.recall, q.RecallMargin(), static_cast<long long>(q.firing),
           q.precision, 100 * q.predicted_sparsity, 100 * q.true_sparsity);
    if (q.RecallMargin() > o.margin) {
      fprintf(stderr,
              "pi-train-predictor: warning: layer %d's recall rests on %lld firings of %lld "
              "held-out tokens (+- %.3f), coarser than --margin %.3g: hold out more text\n",
              l, static_cast<long long>(q.firing), static_cast<long long>(n_hold), q.RecallMargin(),
              o.margin);
    }
  }
  printf("mean   recall %.4f, predicted sparsity %.2f%%, true sparsity %.2f%%\n", mean_recall,
         100 * mean_pred_sp, 100 * mean_true_sp);
}

// The model's tensors with ffn_down as ffn_down_t (its own fc1/fc2 left out).
pi::Status AddModelTensors(const pi::GgufFile& file, pi::GgufWriter* w) {
  for (const pi::TensorInfo& t : file.tensors()) {
    if (EndsWith(t.name, ".fc1.weight") || EndsWith(t.name, ".fc2.weight")) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    pi::Status s;
    if (t.name.compare(0, 4, "blk.") == 0 && EndsWith(t.name, ".ffn_down.weight") &&
        t.n_dims == 2) {
      const int block = pi::GetDTypeInfo(static_cast<uint32_t>(t.type)).block_elems;
      const pi::DType to = t.ne[1] % block == 0 ? t.type : pi::DType::kF32;
      const std::string name = t.name.substr(0, t.name.size() - 7) + "_t.weight";
      s = w->AddTensorFill(name, to, {t.ne[1], t.ne[0]}, [&t, to](void* dst) {
        pi::TransposeTensor(t, to, static_cast<uint8_t*>(dst));
        return pi::Status::Ok();
      });
    } else {
      s = w->AddTensorFill(t.name, t.type, ne, [&t](void* dst) {
        std::memcpy(dst, t.data, t.nbytes);
        return pi::Status::Ok();
      });
    }
    PI_RETURN_IF_ERROR(s);
  }
  return pi::Status::Ok();
}

// 4. Writes the PowerInfer GGUF: every key and tensor of the model, the
// predictors, the threshold.
pi::Status WritePredictorFile(const Options& o, const pi::LlamaModel& model,
                              const std::vector<pi::LayerPredictor>& preds,
                              const Calibration& cal) {
  const pi::LlamaConfig& c = model.config;
  const pi::DType wtype = o.wtype;
  pi::GgufWriter w;
  w.SetSparseMagic(true);
  for (const auto& kv : model.file->metadata()) w.Set(kv.first, kv.second);
  w.Set("powerinfer.sparse_threshold", pi::GgufValue::F32(cal.threshold));
  w.Set(pi::kFfnActivationKey, pi::GgufValue::String(pi::FfnActivationName(c.activation)));
  PI_RETURN_IF_ERROR(AddModelTensors(*model.file, &w));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int r = preds[l].rank;
    std::vector<uint8_t> b1(pi::RowBytes(wtype, c.n_embd) * r);
    std::vector<uint8_t> b2(pi::RowBytes(wtype, r) * c.n_ff);
    for (int j = 0; j < r; ++j) {
      pi::QuantizeRow(wtype, cal.w1[l].data() + static_cast<size_t>(j) * c.n_embd,
                      b1.data() + j * pi::RowBytes(wtype, c.n_embd), c.n_embd);
    }
    for (int i = 0; i < c.n_ff; ++i) {
      pi::QuantizeRow(wtype, cal.w2[l].data() + static_cast<size_t>(i) * r,
                      b2.data() + i * pi::RowBytes(wtype, r), r);
    }
    PI_RETURN_IF_ERROR(w.AddTensor(p + "fc1.weight", wtype, {c.n_embd, r}, b1.data()));
    PI_RETURN_IF_ERROR(w.AddTensor(p + "fc2.weight", wtype, {r, c.n_ff}, b2.data()));
  }
  return w.Write(o.out_path);
}

}  // namespace

static int Run(int argc, char** argv) {
  Options o;
  int rc = ParseOptions(argc, argv, &o);
  if (rc >= 0) return rc;
  if (!pi::CheckOutputs("pi-train-predictor", {o.out_path})) return 1;

  pi::LlamaModel model;
  std::unique_ptr<pi::Tokenizer> tok;
  pi::Status s = pi::LoadModelAndTokenizer("pi-train-predictor", o.model_path, o.ffn_activation,
                                           false, &model, &tok);
  pi::Corpus text;
  if (s.ok()) s = pi::ReadCorpus(o.text_path, *tok, -1, &text);
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  const pi::LlamaConfig& c = model.config;
  if ((rc = CheckModel(model, &o)) >= 0) return rc;

  pi::PredictorSamples data;
  if ((rc = Collect(o, model, *tok, text.tokens, &data)) >= 0) return rc;
  const int64_t n_train =
      std::max<int64_t>(1, static_cast<int64_t>(data.n_tokens() * (1.0 - o.holdout)));
  if (data.n_tokens() - n_train < 1) {
    fprintf(stderr, "pi-train-predictor: --holdout %.3g leaves no held-out tokens\n", o.holdout);
    return 2;
  }
  if (o.ranks.empty()) o.ranks = AdaptiveRanks(data, n_train, c, o.rank_step());

  std::vector<pi::LayerPredictor> preds;
  pi::ThreadPool pool(std::min(o.n_threads, c.n_layer));  // a layer per task
  TrainLayers(o, data, n_train, c.n_layer, &pool, &preds);
  const Calibration cal = Calibrate(o, data, preds, n_train, c, &pool);
  PrintQuality(o, data, preds, cal, n_train, c.n_ff);

  s = WritePredictorFile(o, model, preds, cal);
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  fprintf(stderr, "pi-train-predictor: wrote %s (%s predictors, threshold %g)\n",
          o.out_path.c_str(), o.predictor_type.c_str(), cal.threshold);
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-train-predictor", Run, argc, argv);
}
