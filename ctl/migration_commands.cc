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
void printMoved(std::ostream& out, const client::MigrationStats& s) {
  out << "migrated " << migrationSummary(s) << "\n" << migrationStatsLine(s) << "\n";
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
  // Waiting (the default), the daemon answers only once the move is committed, or fails it: an
  // uncommitted move would be its bug, and a script must not take it for success.
  const bool failed = request.wait && !stats.committed && stats.units > 0;
  if (c.args.json) {
    JsonWriter j;
    writeJson(j, stats);
    c.out << j.str() << "\n";
  } else if (!request.wait) {
    c.out << migrationStarted(stats)
          << "; its outcome will appear in `jitllmctl events` (migration.committed or migration.failed)\n";
  } else if (stats.units == 0) {
    c.out << "nothing to migrate: " << requestedRange(target) << " is on " << stats.to << " already\n"
          << migrationStatsLine(stats) << "\n";
  } else if (!failed) {
    printMoved(c.out, stats);
  }
  if (failed) {
    c.out.flush();
    c.err << "jitllmctl: migration " << stats.id << " of " << requestedRange(target)
          << " returned without committing; see `jitllmctl events`\n";
    return 1;
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
