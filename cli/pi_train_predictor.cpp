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
#include "cli/read_file.h"
#include "cli/tool_main.h"
#include "common/gguf.h"
#include "common/llama_model.h"
#include "common/predictor_samples.h"
#include "common/predictor_training.h"
#include "common/progress.h"
#include "common/thread_pool.h"
#include "common/tokenizer.h"
#include "common/transpose_tensor.h"
#include "coordinator/engine.h"
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
          "  -f, --file FILE         training text\n"
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

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-train-predictor", argc, argv);
  std::string ffn_activation;  // --ffn-activation
  std::string model_path, text_path, out_path;
  int rank = 0;  // 0: per layer, from the collected firing rates
  std::vector<int> ranks;
  int64_t max_tokens = 20000;
  int n_ctx = 256;
  double holdout = 0.1, target = 0.95, margin = 0.03;
  bool shared_threshold = false;
  std::string predictor_type = "f16";
  pi::PredictorTrainParams tp;
  int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
    if (f == "-m" || f == "--model")
      model_path = args.String(f);
    else if (f == "-f" || f == "--file")
      text_path = args.String(f);
    else if (f == "-o" || f == "--output")
      out_path = args.String(f);
    else if (f == "--rank")
      rank = args.Int(f);
    else if (f == "--ranks") {
      const std::string v = args.String(f);
      if (!args.failed() && !ParseRanks(v, &ranks))
        args.Fail("--ranks expects comma-separated sizes >= 1, got '" + v + "'");
    } else if (f == "--max-tokens")
      max_tokens = args.Int64(f);
    else if (f == "-c" || f == "--ctx-size")
      n_ctx = args.Int(f);
    else if (f == "--epochs")
      tp.epochs = args.Int(f);
    else if (f == "--patience")
      tp.patience = args.Int(f);
    else if (f == "--lr")
      tp.lr = args.Float(f);
    else if (f == "--batch")
      tp.batch = args.Int(f);
    else if (f == "--pos-weight")
      tp.pos_weight = args.Float(f);
    else if (f == "--holdout")
      holdout = args.Float(f);
    else if (f == "--target-recall")
      target = args.Float(f);
    else if (f == "--margin")
      margin = args.Float(f);
    else if (f == "--shared-threshold")
      shared_threshold = true;
    else if (f == "--f32")
      predictor_type = "f32";
    else if (f == "--predictor-type")
      predictor_type = args.String(f);
    else if (f == "--seed")
      tp.seed = static_cast<uint64_t>(args.Int64(f));
    else if (f == "-t" || f == "--threads")
      n_threads = args.Int(f);
    else if (pi::ParseFfnActivationFlag(f, &args, &ffn_activation)) {
    } else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
  if (model_path.empty() || text_path.empty() || out_path.empty()) {
    fprintf(stderr, "pi-train-predictor: -m MODEL, -f TEXT and -o OUT are required (see --help)\n");
    return 2;
  }
  if (rank < 0 || rank > 65536 || max_tokens < 16 || n_ctx < 2 || tp.epochs < 1 ||
      tp.patience < 1 || !(tp.lr > 0) || tp.batch < 1 || tp.batch > 4096 || !(tp.pos_weight > 0) ||
      !(holdout > 0 && holdout < 1) || !(target > 0 && target <= 1) ||
      !(margin >= 0 && margin < 1) || n_threads < 1 || n_threads > 512) {
    fprintf(stderr,
            "pi-train-predictor: invalid option: need --rank >= 1, --max-tokens >= 16, -c >= 2, "
            "--epochs/--patience/--batch/-t >= 1, --lr/--pos-weight > 0, 0 < --holdout < 1, "
            "0 < --target-recall <= 1\n");
    return 2;
  }
  if (!pi::CheckOutputs("pi-train-predictor", {out_path})) return 1;

  pi::LlamaModel model;
  pi::Status s = pi::LoadLlamaModel(model_path, &model);
  if (s.ok()) s = pi::ApplyFfnActivationFlag("pi-train-predictor", ffn_activation, &model);
  std::unique_ptr<pi::Tokenizer> tok;
  if (s.ok()) s = pi::Tokenizer::FromGguf(*model.file, &tok).WithContext(model_path);
  std::string text;
  if (s.ok()) s = pi::ReadWholeFile(text_path, &text);
  std::vector<int32_t> tokens;
  if (s.ok()) s = tok->Encode(text, false, &tokens).WithContext(text_path);
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  const pi::LlamaConfig& c = model.config;
  if (!pi::FfnIsReluFamily(c.activation)) {
    fprintf(stderr,
            "pi-train-predictor: %s uses %s, whose activations are never exactly zero: there "
            "is nothing to predict (a relu or drelu model is needed)\n",
            model_path.c_str(), pi::FfnActivationName(c.activation));
    return 1;
  }
  // The file's own predictors are replaced, not kept beside the new ones: say so.
  int had = 0;
  for (const pi::LlamaLayer& l : model.layers) had += l.fc1.present() && l.fc2.present();
  if (had > 0) {
    fprintf(stderr,
            "pi-train-predictor: note: %s already has predictors for %d of %d layers; %s gets "
            "newly trained ones in their place\n",
            model_path.c_str(), had, c.n_layer, out_path.c_str());
  }
  if (ranks.empty() && rank > 0) ranks.assign(c.n_layer, rank);
  if (!ranks.empty() && static_cast<int>(ranks.size()) != c.n_layer) {
    fprintf(stderr, "pi-train-predictor: --ranks gives %zu sizes for %d layers\n", ranks.size(),
            c.n_layer);
    return 2;
  }
  pi::DType wtype = pi::DType::kF16;
  if (predictor_type == "f32") {
    wtype = pi::DType::kF32;
  } else if (predictor_type == "q8_0") {
    wtype = pi::DType::kQ8_0;
  } else if (predictor_type != "f16") {
    fprintf(stderr, "pi-train-predictor: --predictor-type %s: expected f16, f32 or q8_0\n",
            predictor_type.c_str());
    return 2;
  }
  // fc2's rows have `rank` weights: whole Q8_0 blocks need multiples of 32.
  const int rank_step = wtype == pi::DType::kQ8_0 ? 32 : 16;
  for (int r : ranks) {
    if (r % rank_step != 0) {
      fprintf(stderr,
              "pi-train-predictor: rank %d: %s predictors need ranks that are multiples "
              "of %d\n",
              r, predictor_type.c_str(), rank_step);
      return 2;
    }
  }
  if (c.n_embd % 32 != 0 && wtype == pi::DType::kQ8_0) {
    fprintf(stderr, "pi-train-predictor: q8_0 predictors need n_embd %% 32 == 0 (n_embd %d)\n",
            c.n_embd);
    return 2;
  }

  // 1. Collect (dense run).
  pi::EngineOptions opt;
  opt.n_threads = n_threads;
  opt.n_ctx = std::min(n_ctx, c.n_ctx_train > 0 ? c.n_ctx_train : n_ctx);
  std::unique_ptr<pi::Engine> engine;
  s = pi::Engine::Create(&model, opt, &engine);
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  const bool bos = tok->add_bos_token() && tok->bos() >= 0;
  const int per_chunk = engine->n_ctx() - (bos ? 1 : 0);
  int64_t total = 0;
  for (size_t i = 0; i < tokens.size(); i += per_chunk) {
    total += std::min<int64_t>(per_chunk, tokens.size() - i) + (bos ? 1 : 0);
  }
  total = std::min(total, max_tokens);
  const int64_t n_train_planned =
      std::max<int64_t>(1, static_cast<int64_t>(total * (1.0 - holdout)));
  if (n_train_planned < kMinTrainTokens || total - n_train_planned < kMinHeldOutTokens) {
    fprintf(stderr,
            "pi-train-predictor: '%s' gives %lld tokens (--max-tokens %lld, --holdout %.3g): %lld "
            "to train on and %lld held out; training needs at least %lld and measuring recall at "
            "least %lld held out (a longer text, or a larger --max-tokens or --holdout)\n",
            text_path.c_str(), static_cast<long long>(total), static_cast<long long>(max_tokens),
            holdout, static_cast<long long>(n_train_planned),
            static_cast<long long>(total - n_train_planned),
            static_cast<long long>(kMinTrainTokens), static_cast<long long>(kMinHeldOutTokens));
    return 1;
  }
  fprintf(stderr,
          "pi-train-predictor: %s (%d layers, n_embd %d, n_ff %d, %s), collecting %lld tokens "
          "of %s (%.0f MiB of samples, f16, file-backed in %s), %d threads\n",
          model_path.c_str(), c.n_layer, c.n_embd, c.n_ff, pi::FfnActivationName(c.activation),
          static_cast<long long>(total), text_path.c_str(),
          pi::PredictorSamples::Bytes(c.n_layer, c.n_embd, c.n_ff, total) / 1048576.0,
          SampleDir(out_path).c_str(), n_threads);
  pi::PredictorSamples data;
  s = data.Init(c.n_layer, c.n_embd, c.n_ff, total, SampleDir(out_path));
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  engine->SetFfnObserver(&data);
  {
    pi::ProgressBar bar("collect", total, "tok");
    std::vector<int32_t> chunk;
    int64_t done = 0;
    for (size_t i = 0; i < tokens.size() && done < total; i += per_chunk) {
      chunk.clear();
      if (bos) chunk.push_back(tok->bos());
      chunk.insert(chunk.end(), tokens.begin() + i,
                   tokens.begin() + std::min(tokens.size(), i + per_chunk));
      if (static_cast<int64_t>(chunk.size()) > total - done) chunk.resize(total - done);
      engine->Reset();
      s = engine->Eval(chunk.data(), static_cast<int>(chunk.size()));
      if (!s.ok()) {
        fprintf(stderr, "\npi-train-predictor: %s\n", s.message().c_str());
        return 1;
      }
      done += static_cast<int64_t>(chunk.size());
      bar.Update(done);
    }
    bar.Finish();
  }
  engine.reset();
  const int64_t n_total = data.n_tokens();
  const int64_t n_train = std::max<int64_t>(1, static_cast<int64_t>(n_total * (1.0 - holdout)));
  const int64_t n_hold = n_total - n_train;
  if (n_hold < 1) {
    fprintf(stderr, "pi-train-predictor: --holdout %.3g leaves no held-out tokens\n", holdout);
    return 2;
  }

  // Adaptive ranks (PowerInfer sizes its predictors per layer too): a layer
  // whose tokens fire k neurons on average gets rank k / 2, rounded up to a
  // multiple of 16 (32 for q8_0) and kept in [32, n_embd / 2]. Denser layers need a finer
  // predictor, and each predictor weight costs about as much to read as the
  // FFN rows a better prediction saves.
  if (ranks.empty()) {
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
  }

  // 2. Train, one layer per pool chunk.
  std::vector<pi::LayerPredictor> preds(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) preds[l].rank = ranks[l];
  fprintf(stderr,
          "pi-train-predictor: training %d layers on %lld tokens (%lld held out), ranks %d..%d, "
          "batch %d, lr %g, pos-weight %g, at most %d epochs\n",
          c.n_layer, static_cast<long long>(n_train), static_cast<long long>(n_hold),
          *std::min_element(ranks.begin(), ranks.end()),
          *std::max_element(ranks.begin(), ranks.end()), tp.batch, tp.lr, tp.pos_weight, tp.epochs);
  std::mutex print_mu;
  std::atomic<int64_t> epochs_done{0};
  const double t_start = pi::NowSeconds();
  pi::ThreadPool pool(std::min(n_threads, c.n_layer));  // a layer per task
  pool.ParallelFor(c.n_layer, [&](int64_t l, int) {
    pi::TrainLayerPredictor(
        data, static_cast<int>(l), n_train, n_total, tp, &preds[l],
        [&](int epoch, double train_loss, double val, bool best) {
          const int64_t done = ++epochs_done;
          const double el = pi::NowSeconds() - t_start;
          const double eta = el / done * (static_cast<double>(c.n_layer) * tp.epochs - done);
          std::lock_guard<std::mutex> lock(print_mu);
          fprintf(stderr,
                  "  layer %2lld epoch %2d/%d  train loss %.4f  held-out %.4f%s  [%.0f s, ETA <= "
                  "%.0f s]\n",
                  static_cast<long long>(l), epoch, tp.epochs, train_loss, val, best ? " *" : "",
                  el, eta);
        });
  });
  fprintf(stderr, "pi-train-predictor: trained in %.1f s\n", pi::NowSeconds() - t_start);

  // 3. Calibrate on the held-out tail, layers in parallel.
  const double cal_target = std::min(1.0, target + margin);
  std::vector<std::vector<float>> w1(c.n_layer), w2(c.n_layer), scores(c.n_layer);
  std::vector<float> t_layer(c.n_layer);
  // Scores of layer l's held-out tokens with fc2 scaled by `fc2_scale`, and
  // the largest threshold meeting the calibration target on them.
  auto score_layer = [&](int l, float fc2_scale) {
    pi::FinalPredictorWeights(preds[l], c.n_embd, c.n_ff, wtype, fc2_scale, &w1[l], &w2[l]);
    pi::PredictorScores(data, l, n_train, n_hold, c.n_embd, c.n_ff, w1[l], w2[l], preds[l].rank,
                        &scores[l]);
    t_layer[l] = pi::ThresholdForRecall(data, l, n_train, n_hold, c.n_ff, scores[l], cal_target);
  };
  pool.ParallelFor(c.n_layer, [&](int64_t l, int) { score_layer(static_cast<int>(l), 1.0f); });
  bool all_neg = true, all_pos = true;
  for (float t : t_layer) {
    all_neg &= t < 0 && std::isfinite(t);
    all_pos &= t > 0 && std::isfinite(t);
  }
  const bool per_layer = !shared_threshold && (all_neg || all_pos);
  float threshold;
  std::vector<float> fc2_scale(c.n_layer, 1.0f);
  if (per_layer) {
    threshold = all_neg ? -1.0f : 1.0f;
    for (int l = 0; l < c.n_layer; ++l) fc2_scale[l] = 1.0f / std::fabs(t_layer[l]);
    pool.ParallelFor(c.n_layer,
                     [&](int64_t l, int) { score_layer(static_cast<int>(l), fc2_scale[l]); });
    // Rounding the scaled weights to F16 moves scores slightly: nudge the
    // threshold down until every layer meets the target again.
    for (int l = 0; l < c.n_layer; ++l) threshold = std::min(threshold, t_layer[l]);
  } else {
    threshold = *std::min_element(t_layer.begin(), t_layer.end());
    if (!std::isfinite(threshold)) threshold = 0.0f;
  }

  printf(
      "predictor quality on the %lld held-out tokens at threshold %g (recall target %.3g + "
      "margin %.3g; %s):\n",
      static_cast<long long>(n_hold), threshold, target, margin,
      per_layer ? "per-layer calibration folded into fc2" : "one shared threshold");
  printf(
      "layer  rank  epochs  recall (95%% interval, firings)  precision  pred.sparsity  true "
      "sparsity\n");
  double mean_recall = 0, mean_pred_sp = 0, mean_true_sp = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const pi::PredictorQuality q =
        pi::MeasurePredictor(data, l, n_train, n_hold, c.n_ff, scores[l], threshold);
    mean_recall += q.recall / c.n_layer;
    mean_pred_sp += q.predicted_sparsity / c.n_layer;
    mean_true_sp += q.true_sparsity / c.n_layer;
    printf("%5d  %4d  %6d  %6.4f +- %.4f %12lld  %9.4f  %12.2f%%  %12.2f%%\n", l, preds[l].rank,
           preds[l].epochs_run, q.recall, q.RecallMargin(), static_cast<long long>(q.firing),
           q.precision, 100 * q.predicted_sparsity, 100 * q.true_sparsity);
    if (q.RecallMargin() > margin) {
      fprintf(stderr,
              "pi-train-predictor: warning: layer %d's recall rests on %lld firings of %lld "
              "held-out tokens (+- %.3f), coarser than --margin %.3g: hold out more text\n",
              l, static_cast<long long>(q.firing), static_cast<long long>(n_hold), q.RecallMargin(),
              margin);
    }
  }
  printf("mean   recall %.4f, predicted sparsity %.2f%%, true sparsity %.2f%%\n", mean_recall,
         100 * mean_pred_sp, 100 * mean_true_sp);

  // 4. Write the PowerInfer GGUF.
  pi::GgufWriter w;
  w.SetSparseMagic(true);
  for (const auto& kv : model.file->metadata()) w.Set(kv.first, kv.second);
  w.Set("powerinfer.sparse_threshold", pi::GgufValue::F32(threshold));
  w.Set(pi::kFfnActivationKey, pi::GgufValue::String(pi::FfnActivationName(c.activation)));
  for (const pi::TensorInfo& t : model.file->tensors()) {
    if (EndsWith(t.name, ".fc1.weight") || EndsWith(t.name, ".fc2.weight")) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.name.compare(0, 4, "blk.") == 0 && EndsWith(t.name, ".ffn_down.weight") &&
        t.n_dims == 2) {
      const int block = pi::GetDTypeInfo(static_cast<uint32_t>(t.type)).block_elems;
      const pi::DType to = t.ne[1] % block == 0 ? t.type : pi::DType::kF32;
      const std::string name = t.name.substr(0, t.name.size() - 7) + "_t.weight";
      s = w.AddTensorFill(name, to, {t.ne[1], t.ne[0]}, [&t, to](void* dst) {
        pi::TransposeTensor(t, to, static_cast<uint8_t*>(dst));
        return pi::Status::Ok();
      });
    } else {
      s = w.AddTensorFill(t.name, t.type, ne, [&t](void* dst) {
        std::memcpy(dst, t.data, t.nbytes);
        return pi::Status::Ok();
      });
    }
    if (!s.ok()) break;
  }
  for (int l = 0; l < c.n_layer && s.ok(); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int r = preds[l].rank;
    std::vector<uint8_t> b1(pi::RowBytes(wtype, c.n_embd) * r);
    std::vector<uint8_t> b2(pi::RowBytes(wtype, r) * c.n_ff);
    for (int j = 0; j < r; ++j) {
      pi::QuantizeRow(wtype, w1[l].data() + static_cast<size_t>(j) * c.n_embd,
                      b1.data() + j * pi::RowBytes(wtype, c.n_embd), c.n_embd);
    }
    for (int i = 0; i < c.n_ff; ++i) {
      pi::QuantizeRow(wtype, w2[l].data() + static_cast<size_t>(i) * r,
                      b2.data() + i * pi::RowBytes(wtype, r), r);
    }
    s = w.AddTensor(p + "fc1.weight", wtype, {c.n_embd, r}, b1.data());
    if (s.ok()) s = w.AddTensor(p + "fc2.weight", wtype, {r, c.n_ff}, b2.data());
  }
  if (s.ok()) s = w.Write(out_path);
  if (!s.ok()) {
    fprintf(stderr, "pi-train-predictor: %s\n", s.message().c_str());
    return 1;
  }
  fprintf(stderr, "pi-train-predictor: wrote %s (%s predictors, threshold %g)\n", out_path.c_str(),
          predictor_type.c_str(), threshold);
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-train-predictor", Run, argc, argv);
}
