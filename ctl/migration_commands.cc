// migrate, pin and unpin: moving a model's layers between devices and keeping them there.
#include <ostream>

#include "ctl/commands.h"
#include "ctl/json_views.h"
#include "ctl/text_format.h"

namespace jitllm::ctl {
namespace {

// "stories:0-5" as given, or "stories (every unit)".
std::string requestedRange(const ModelLayers& target) {
  return target.layers.empty() ? target.model + " (every unit)" : target.model + ":" + target.layers;
}

// The two lines of a migration that ran: what moved, then the numbers.
void printMoved(std::ostream& out, const client::MigrationStats& s, const char* verb = "migrated ") {
  out << verb << migrationSummary(s) << "\n" << migrationStatsLine(s) << "\n";
}

// What migrate and tp print. Waiting (the default), the daemon answers only once the change is
// committed, or fails it: an uncommitted one would be its bug, and a script must not take it for
// success.
int report(Context& c, const client::MigrationStats& stats, bool wait, const ModelLayers& target, const char* verb,
           const char* nothing, const char* where, const char* what) {
  const bool failed = wait && !stats.committed && stats.units > 0;
  if (c.args.json) {
    JsonWriter j;
    writeJson(j, stats);
    c.out << j.str() << "\n";
  } else if (!wait) {
    c.out << migrationStarted(stats)
          << "; its outcome will appear in `jitllmctl events` (migration.committed or migration.failed)\n";
  } else if (stats.units == 0) {
    c.out << nothing << requestedRange(target) << where << stats.to << " already\n"
          << migrationStatsLine(stats) << "\n";
  } else if (!failed) {
    printMoved(c.out, stats, verb);
  }
  if (failed) {
    c.out.flush();
    c.err << "jitllmctl: " << what << stats.id << " of " << requestedRange(target)
          << " returned without committing; see `jitllmctl events`\n";
    return 1;
  }
  return 0;
}

std::string deviceArgument(const Context& c, size_t index) {
  const std::string& device = c.args.arguments.at(index);
  if (device.empty()) throw UsageError("DEVICE is empty (e.g. cpu:1, vulkan:0)", std::string(c.args.command->name));
  return device;
}

}  // namespace

int runMigrate(Context& c) {
  const ModelLayers target = parseModelLayers(c.args.arguments[0], "migrate");
  client::MigrateRequest request;
  request.model = target.model;
  request.layers = target.layers;
  request.device = deviceArgument(c, 1);
  request.wait = !c.args.has("--no-wait");
  request.precopy = !c.args.has("--no-precopy");
  request.force = c.args.has("--force");
  auto client = c.connect();
  client::MigrationStats stats = client.migrate(request);
  if (stats.model.empty()) stats.model = request.model;
  if (stats.to.empty()) stats.to = request.device;
  return report(c, stats, request.wait, target, "migrated ", "nothing to migrate: ", " is on ", "migration ");
}

namespace {

// The devices of `jitllmctl tp NAME K` when none are named: the device its first block runs on (or
// the first of its split), then the daemon's other devices of that backend in order.
std::vector<std::string> defaultSplit(client::Client& client, const std::string& model, size_t k) {
  std::string first;
  for (const auto& m : client.models()) {
    if (m.name == model && m.layerStates.size() > 2)
      first = m.layerStates[1].device.substr(0, m.layerStates[1].device.find('+'));
  }
  if (first.empty())
    throw client::Error(client::ErrorKind::kFailed, "no model named '" + model + "' (see jitllmctl ps)");
  std::vector<std::string> out{first};
  const std::string backend = first.substr(0, first.find(':') + 1);
  for (const auto& d : client.devices()) {
    if (out.size() < k && d.id != first && d.id.rfind(backend, 0) == 0) out.push_back(d.id);
  }
  if (out.size() < k) {
    throw client::Error(client::ErrorKind::kFailed, "jitllmd has " + std::to_string(out.size()) + " " +
                                                        backend.substr(0, backend.size() - 1) + " device(s), not " +
                                                        std::to_string(k) + ": name the devices (e.g. cuda:0,cpu:0)");
  }
  return out;
}

}  // namespace

int runTensorParallel(Context& c) {
  const ModelLayers target = parseModelLayers(c.args.arguments[0], "tp");
  const std::string& degree = c.args.arguments[1];
  if (degree != "1" && degree != "2" && degree != "4") throw UsageError("K is 1, 2 or 4, not '" + degree + "'", "tp");
  const size_t k = size_t(std::stoi(degree));
  client::TensorParallelRequest request;
  request.model = target.model;
  request.layers = target.layers;
  if (c.args.arguments.size() > 2) {
    std::string list = c.args.arguments[2];
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      request.devices.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
    if (request.devices.size() != k) {
      throw UsageError("K is " + degree + " but DEVICES names " + std::to_string(request.devices.size()), "tp");
    }
  }
  request.wait = !c.args.has("--no-wait");
  request.precopy = !c.args.has("--no-precopy");
  request.partialSums = c.args.has("--partial-sums");
  request.force = c.args.has("--force");
  auto client = c.connect();
  if (request.devices.empty()) request.devices = defaultSplit(client, request.model, k);
  client::MigrationStats stats = client.tensorParallel(request);
  if (stats.model.empty()) stats.model = request.model;
  return report(c, stats, request.wait, target, "split ", "nothing to switch: ", " is split over ",
                "tensor-parallel switch ");
}

int runReplicate(Context& c) {
  const std::string& model = c.args.arguments[0];
  const std::string device = deviceArgument(c, 1);
  auto client = c.connect();
  const client::ModelInfo replica = client.replicate(model, device);
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().field("model", model).field("replica", replica.name).field("device", device).endObject();
    c.out << j.str() << "\n";
  } else {
    c.out << "replica " << replica.name << " of " << model << " on " << device << ": requests for " << model
          << " go to whichever copy has the fewest jobs; `jitllmctl unload " << replica.name << "` drops it\n";
  }
  return 0;
}

int runPin(Context& c) {
  const ModelLayers target = parseModelLayers(c.args.arguments[0], "pin");
  const std::string device = deviceArgument(c, 1);
  auto client = c.connect();
  client::MigrationStats stats = client.pin(target.model, target.layers, device);
  if (stats.model.empty()) stats.model = target.model;
  if (stats.to.empty()) stats.to = device;
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().field("model", target.model).field("layers", target.layers).field("pinned", device);
    j.key("migration");
    writeJson(j, stats);
    j.endObject();
    c.out << j.str() << "\n";
    return 0;
  }
  if (stats.units > 0) printMoved(c.out, stats);
  c.out << "pinned " << requestedRange(target) << " to " << device << "\n";
  return 0;
}

int runUnpin(Context& c) {
  const ModelLayers target = parseModelLayers(c.args.arguments[0], "unpin");
  auto client = c.connect();
  client.unpin(target.model, target.layers);
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().field("model", target.model).field("layers", target.layers).field("unpinned", true).endObject();
    c.out << j.str() << "\n";
  } else {
    c.out << "unpinned " << requestedRange(target) << "\n";
  }
  return 0;
}

int runPolicy(Context& c) {
  auto client = c.connect();
  const std::string wanted = c.args.arguments.empty() ? std::string() : c.args.arguments[0];
  const client::PolicyInfo info = client.policy(wanted);
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().field("policy", info.name).key("available").beginArray();
    for (const auto& n : info.available) j.value(n);
    j.endArray().endObject();
    c.out << j.str() << "\n";
  } else {
    c.out << (wanted.empty() ? "policy " : "policy now ") << info.name << " (available:";
    for (const auto& n : info.available) c.out << " " << n;
    c.out << ")\n";
  }
  return 0;
}

}  // namespace jitllm::ctl
