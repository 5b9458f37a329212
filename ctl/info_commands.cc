// status, devices, ps, events: what the daemon holds and what happens in it.
#include <cstdio>
#include <ostream>
#include <vector>

#include "ctl/commands.h"
#include "ctl/json_views.h"
#include "ctl/text_format.h"

namespace jitllm::ctl {
namespace {

size_t sessionCount(const std::vector<client::ModelInfo>& models) {
  size_t n = 0;
  for (const auto& m : models) n += m.sessions.size();
  return n;
}

}  // namespace

int runStatus(Context& c) {
  auto client = c.connect();
  const client::Version v = client.version();
  const auto devices = client.devices();
  const auto models = client.models();
  if (c.args.json) {
    JsonWriter j;
    j.beginObject();
    j.field("running", true).field("socket", client.socketPath());
    j.key("daemon");
    writeJson(j, v);
    j.key("client")
        .beginObject()
        .field("version", client::libraryVersion())
        .field("protocol", client::kProtocolVersion)
        .endObject();
    j.field("devices", devices.size()).field("models", models.size()).field("sessions", sessionCount(models));
    j.endObject();
    c.out << j.str() << "\n";
    return 0;
  }
  c.out << "jitllmd " << v.major << "." << v.minor << "." << v.patch << " (protocol " << v.protocol
        << ") is running at " << client.socketPath() << "\n";
  if (!v.build.empty()) c.out << "build: " << v.build << "\n";
  c.out << devices.size() << (devices.size() == 1 ? " device, " : " devices, ") << models.size()
        << (models.size() == 1 ? " model, " : " models, ") << sessionCount(models)
        << (sessionCount(models) == 1 ? " session" : " sessions") << "\n";
  return 0;
}

int runDevices(Context& c) {
  auto client = c.connect();
  const auto devices = client.devices();
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().key("devices").beginArray();
    for (const auto& d : devices) writeJson(j, d);
    j.endArray().endObject();
    c.out << j.str() << "\n";
    return 0;
  }
  TextTable t({"DEVICE", "STATE", "BACKEND", "MEMORY USED", "TOTAL", "THREADS", "TEMP", "UTIL", "POWER", "NAME"});
  for (const auto& d : devices) {
    char temp[16] = "-", util[16] = "-", power[16] = "-";
    if (d.telemetry.temperatureC == d.telemetry.temperatureC && d.telemetry.temperatureC > 0) {
      std::snprintf(temp, sizeof(temp), "%.0f C", double(d.telemetry.temperatureC));
    }
    if (d.telemetry.utilization == d.telemetry.utilization) {
      std::snprintf(util, sizeof(util), "%.0f%%", double(d.telemetry.utilization) * 100);
    }
    if (d.telemetry.powerWatts == d.telemetry.powerWatts) {
      std::snprintf(power, sizeof(power), "%.0f W", double(d.telemetry.powerWatts));
    }
    t.add({d.id, d.online ? "online" : "gone: " + d.offlineReason, d.backend + (d.software ? " (software)" : ""),
           humanBytes(d.memoryUsed), humanBytes(d.memoryTotal), d.threads ? std::to_string(d.threads) : "-", temp, util,
           power, d.name});
  }
  c.out << t.render();
  return 0;
}

int runPs(Context& c) {
  auto client = c.connect();
  auto models = client.models();
  if (!c.args.arguments.empty()) {
    const std::string& name = c.args.arguments[0];
    std::string loaded;
    for (const auto& m : models) loaded += (loaded.empty() ? "" : ", ") + m.name;
    std::erase_if(models, [&](const client::ModelInfo& m) { return m.name != name; });
    if (models.empty()) {
      throw client::Error(client::ErrorKind::kFailed, "no model named '" + name + "' is loaded (" +
                                                          (loaded.empty() ? "none is" : "loaded: " + loaded) + ")");
    }
  }
  if (c.args.json) {
    JsonWriter j;
    j.beginObject().key("models").beginArray();
    for (const auto& m : models) writeJson(j, m);
    j.endArray().endObject();
    c.out << j.str() << "\n";
    return 0;
  }
  if (models.empty()) {
    c.out << "no models loaded (load one with `jitllmctl load FILE`)\n";
    return 0;
  }
  if (c.args.has("-l")) {
    for (size_t i = 0; i < models.size(); i++) {
      const auto& m = models[i];
      if (i > 0) c.out << "\n";
      c.out << m.name << " (" << m.architecture << ", " << templateLabel(m) << ", " << m.layers << " layers"
            << (m.state.empty() || m.state == "ready" ? "" : ", " + m.state) << "): " << placementSummary(m) << "\n";
      if (!m.migration.empty()) c.out << "migration: " << m.migration << "\n";
      c.out << layerTable(m);
    }
    return 0;
  }
  TextTable t({"MODEL", "STATE", "ARCH", "TEMPLATE", "LAYERS", "CTX", "SESSIONS", "MEMORY", "PLACEMENT"});
  for (const auto& m : models) {
    std::string memory;
    for (const auto& mem : m.memory) {
      if (!memory.empty()) memory += ", ";
      memory += mem.device + " " + humanBytes(mem.weightBytes + mem.kvBytes);
    }
    t.add({m.name, m.state.empty() ? "ready" : m.state, m.architecture, m.chatTemplate.empty() ? "-" : m.chatTemplate,
           std::to_string(m.layers), std::to_string(m.contextSize),
           std::to_string(m.sessions.size()) +
               (m.idleSessions.empty() ? "" : " +" + std::to_string(m.idleSessions.size()) + " idle"),
           memory.empty() ? "-" : memory, placementSummary(m)});
  }
  c.out << t.render();
  // Goodput: per model and tier that has served anything, replies that met their targets.
  TextTable g({"MODEL", "TIER", "TARGETS", "REPLIES", "MET", "GOODPUT"});
  for (const auto& m : models) {
    for (const auto& tier : m.goodput) {
      if (tier.finished == 0) continue;
      char targets[64], rate[32];
      if (tier.ttftTargetMs > 0 || tier.tpotTargetMs > 0) {
        std::snprintf(targets, sizeof targets, "ttft %gms tpot %gms", tier.ttftTargetMs, tier.tpotTargetMs);
      } else {
        std::snprintf(targets, sizeof targets, "none");
      }
      std::snprintf(rate, sizeof rate, "%.2f/s", tier.metPerSecond);
      g.add({m.name, tier.tier, targets, std::to_string(tier.finished), std::to_string(tier.met), rate});
    }
  }
  if (g.rows() > 0) c.out << "\n" << g.render();
  size_t idle = 0;
  for (const auto& m : models) idle += m.idleSessions.size();
  if (sessionCount(models) + idle == 0) return 0;
  TextTable s({"SESSION", "MODEL", "UID", "TIER", "TOKENS", "STATE"});
  for (const auto& m : models) {
    for (const auto* list : {&m.sessions, &m.idleSessions}) {
      for (const auto& session : *list) {
        s.add({std::to_string(session.id), m.name, std::to_string(session.ownerUid),
               session.tier.empty() ? "-" : session.tier,
               std::to_string(session.tokens) + "/" + std::to_string(session.contextLimit), session.state});
      }
    }
  }
  c.out << "\n" << s.render();
  return 0;
}

int runEvents(Context& c) {
  const bool follow = c.args.has("--follow");
  const uint32_t replay = c.args.number<uint32_t>("--replay", follow ? 10 : 100);
  auto client = c.connect();
  auto print = [&](const client::Event& e) {
    if (c.args.json) {
      JsonWriter j;
      writeJson(j, e);
      c.out << j.str() << "\n";  // --follow: JSON Lines, one event per line
    } else {
      c.out << eventLine(e) << "\n";
    }
    c.out.flush();
  };
  if (!follow) {
    const auto events = client.recentEvents(replay);
    if (c.args.json) {
      JsonWriter j;
      j.beginObject().key("events").beginArray();
      for (const auto& e : events) writeJson(j, e);
      j.endArray().endObject();
      c.out << j.str() << "\n";
    } else {
      for (const auto& e : events) print(e);
    }
    return 0;
  }
  client.events(
      [&](const client::Event& e) {
        print(e);
        return bool(c.out);  // stop when stdout is gone
      },
      replay);
  return 0;
}

}  // namespace jitllm::ctl
