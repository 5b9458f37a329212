// jitllm-migrate-bench: how long a live migration stops a model's step loop, against the context
// its sessions hold, with and without pre-copy of sealed KV pages.
//
// For each context length, sessions are filled with that many tokens of KV (pages written with
// random bytes: the values do not matter to a copy, but untouched pages would be copied from the
// kernel's zero page and look free), then the model decodes one token per step for every session
// while the migration prepares between steps, commits at a token boundary, and moves back the
// same way. The pause is LiveMigration's commit (the time the step loop stood still). With --tp the
// blocks instead split over both devices (tensor parallelism) and join back, by TensorParallelSwitch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>

#include "base/error.h"
#include "engine/devices/builtin_backends.h"
#include "engine/runtime/live_migration.h"
#include "engine/runtime/model.h"
#include "engine/runtime/tensor_parallel_switch.h"
#include "tools/command_line.h"
#include "tools/device_list.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-migrate-bench MODEL.gguf [options]
  --devices A,B      the two devices to move between (default cpu:0,cpu:1); a GPU named twice
                     is two devices of that GPU
  --threads N        threads per CPU device (default: all cores)
  --contexts LIST    context lengths in tokens (default 512,2048,8192,32768)
  --sessions N       sessions holding that context each (default 1)
  --repeat N         migrations per row, alternating direction (default 4)
  --tp               split the blocks over both devices and join them back instead of moving
                     them (a tensor-parallel switch: KV re-laid by heads)
Prints one markdown row per (context, pre-copy): the pause (median, min, max), prepare time and
bytes moved before and during the pause.
)";

struct Options {
  std::string model;
  std::string devices = "cpu:0,cpu:1";
  int threads = 0;
  std::vector<int64_t> contexts = {512, 2048, 8192, 32768};
  int sessions = 1;
  int repeat = 4;
  bool tp = false;
};

std::vector<int64_t> parseList(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v <= 0) {
      throw tools::UsageError("--contexts: '" + item + "' is not a positive number");
    }
    out.push_back(v);
  }
  return out;
}

// Writes random bytes over every page a session holds, as a long conversation would have.
void fillKv(runtime::Model& model, runtime::Session& session, std::mt19937& rng) {
  const size_t pageBytes = model.kvLayout().pageBytes();
  std::vector<uint8_t> bytes(pageBytes);
  for (int layer = 0; layer < session.layerCount(); layer++) {
    Device& d = session.layerPool(layer).device();
    for (uint8_t* page : session.pageAddresses(layer)) {
      if (page == nullptr) continue;  // freed by a sliding window
      for (auto& b : bytes) b = uint8_t(rng());
      d.copyFromHost(page, bytes.data(), bytes.size());
    }
  }
}

struct Row {
  std::vector<double> pauses;
  double prepareMs = 0;
  size_t precopied = 0, inPause = 0, kvBytes = 0;
};

Row measure(runtime::Model& model, std::vector<Device*> devices, int64_t context, bool precopy, const Options& o) {
  std::mt19937 rng(1);
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  std::vector<int32_t> last;
  for (int i = 0; i < o.sessions; i++) {
    sessions.push_back(model.createSession(context + 4 * int64_t(o.repeat) * 64 + 64));
    sessions.back()->reserve(context);
    fillKv(model, *sessions.back(), rng);
    sessions.back()->advance(context);
    last.push_back(int32_t(rng() % uint32_t(model.config().vocabSize)));
  }
  Row row;
  for (const auto& s : sessions) row.kvBytes += s->pageCount() * model.kvLayout().pageBytes();
  auto step = [&] {
    std::vector<runtime::SequenceInput> in;
    for (size_t i = 0; i < sessions.size(); i++) in.push_back({sessions[i].get(), {&last[i], 1}, false});
    std::vector<float> logits;
    model.forward(in, logits);
  };
  // Prepares between decode steps, commits at a token boundary, frees the source after the next
  // step: the daemon's order.
  auto cycle = [&](auto& change) {
    while (!change.prepareStep()) step();
    step();
    change.commit();
    step();
    change.releaseSource();
    const auto& st = change.stats();
    row.pauses.push_back(st.pauseMs);
    row.prepareMs += st.prepareMs / o.repeat;
    row.precopied += st.bytesPrecopied / size_t(o.repeat);
    row.inPause += st.bytesInPause / size_t(o.repeat);
  };
  for (int r = 0; r < o.repeat; r++) {
    const runtime::UnitRange all = runtime::parseUnitRange("", int(model.config().layers));
    if (o.tp) {
      runtime::TensorParallelOptions to;
      to.units = all;
      to.devices = r % 2 == 0 ? devices : std::vector<Device*>{devices[0]};
      to.precopy = precopy;
      runtime::TensorParallelSwitch change(model, to);
      cycle(change);
      continue;
    }
    runtime::MigrationOptions mo;
    mo.units = all;
    mo.target = devices[size_t((r + 1) % 2)];
    mo.precopy = precopy;
    runtime::LiveMigration change(model, mo);
    cycle(change);
  }
  return row;
}

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
  Options o;
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "--devices")
      o.devices = cl.value(a);
    else if (a == "--threads")
      o.threads = cl.number<int>(a);
    else if (a == "--contexts")
      o.contexts = parseList(cl.value(a));
    else if (a == "--sessions")
      o.sessions = cl.number<int>(a);
    else if (a == "--repeat")
      o.repeat = cl.number<int>(a);
    else if (a == "--tp")
      o.tp = true;
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-')
      throw tools::UsageError("unknown option " + a);
    else if (o.model.empty())
      o.model = a;
    else
      throw tools::UsageError("one model only");
  }
  if (o.model.empty()) throw tools::UsageError("no model given");
  if (o.sessions < 1 || o.repeat < 1) throw tools::UsageError("--sessions and --repeat must be at least 1");
  runtime::DeviceSpecOptions dso;
  dso.cpuThreads = o.threads;
  auto owned = tools::openEachDevice(o.devices, dso);
  if (owned.size() != 2) throw tools::UsageError("--devices names two devices to move between (or split over)");
  std::printf("%s, %s\n\n", o.tp ? "tensor-parallel switches (1 -> 2 -> 1 ...)" : "migrations", o.devices.c_str());
  std::vector<Device*> devices{owned[0].get(), owned[1].get()};
  std::printf(
      "| context | sessions | pre-copy | KV held | pause median (min-max) ms | prepare ms | pre-copied | in the pause "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int64_t context : o.contexts) {
    for (bool precopy : {true, false}) {
      runtime::ModelLoadOptions lo;
      lo.devices = devices;
      auto probe = runtime::Model::load(o.model, lo);
      lo.placement.assign(size_t(probe->unitCount()), 0);
      probe.reset();
      auto model = runtime::Model::load(o.model, lo);
      Row row = measure(*model, devices, context, precopy, o);
      std::sort(row.pauses.begin(), row.pauses.end());
      std::printf("| %lld | %d | %s | %.1f MB | %.3f (%.3f-%.3f) | %.1f | %.1f MB | %.3f MB |\n", (long long)context,
                  o.sessions, precopy ? "on" : "off", double(row.kvBytes) / 1e6, row.pauses[row.pauses.size() / 2],
                  row.pauses.front(), row.pauses.back(), row.prepareMs, double(row.precopied) / 1e6,
                  double(row.inPause) / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-migrate-bench", kUsage, run, argc, argv); }
