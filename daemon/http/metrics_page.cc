#include "daemon/http/metrics_page.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

namespace jitllm::server::http {
namespace {

// Label values escaped as the format asks: backslash, double quote and newline.
std::string escaped(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class Page {
 public:
  // A metric family's HELP and TYPE lines; its samples follow.
  void family(const std::string& name, const char* type, const char* help) {
    out_ << "# HELP jitllm:" << name << ' ' << help << "\n# TYPE jitllm:" << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, const std::string& labels, double value) {
    out_ << "jitllm:" << name;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << number(value) << '\n';
  }
  void histogram(const std::string& name, const std::string& labels, const LatencyHistogram& h) {
    uint64_t cumulative = 0;
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < h.kBounds.size(); i++) {
      cumulative += h.counts[i];
      sample(name + "_bucket", sep + "le=\"" + number(h.kBounds[i]) + "\"", double(cumulative));
    }
    sample(name + "_bucket", sep + "le=\"+Inf\"", double(h.count));
    sample(name + "_sum", labels, h.sum);
    sample(name + "_count", labels, double(h.count));
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string modelLabel(const std::string& model) { return "model=\"" + escaped(model) + "\""; }
std::string deviceLabel(const std::string& device) { return "device=\"" + escaped(device) + "\""; }

// Sessions computing (prefill or decode), not held back for a slow reader.
size_t runningOf(const ModelSnapshot& snap) {
  size_t running = 0;
  for (const auto& s : snap.sessions) running += s.state != SessionState::kWaiting;
  return running;
}

void requestGauges(Page& page, const std::map<std::string, ModelSnapshot>& models,
                   const std::map<std::string, size_t>& jobs) {
  page.family("requests_running", "gauge", "Generations being computed (prefill or decode).");
  for (const auto& [name, snap] : models) page.sample("requests_running", modelLabel(name), double(runningOf(snap)));
  page.family("requests_waiting", "gauge",
              "Generations queued for a slot or held back because their client reads slowly.");
  for (const auto& [name, snap] : models) {
    const size_t running = runningOf(snap), queued = jobs.at(name);
    page.sample("requests_waiting", modelLabel(name), double(queued >= running ? queued - running : 0));
  }
}

using Counters = std::map<std::string, ModelServingCounters>;

void servingCounters(Page& page, const Counters& counters) {
  auto counter = [&](const char* name, const char* help, auto field) {
    page.family(name, "counter", help);
    for (const auto& [model, c] : counters)
      page.sample(std::string(name) + "_total", modelLabel(model), double(field(c)));
  };
  counter("requests", "Generations that ended, however they ended.", [](const auto& c) { return c.requests; });
  counter("request_failures", "Generations that ended with an error or were cancelled.",
          [](const auto& c) { return c.failedRequests; });
  counter("prompt_tokens", "Prompt tokens of the generations that ended.",
          [](const auto& c) { return c.promptTokens; });
  counter("generation_tokens", "Tokens generated.", [](const auto& c) { return c.generatedTokens; });
  counter("migrations", "Live migrations committed.", [](const auto& c) { return c.migrations; });
  // Goodput per service tier (docs/tiers.md): rate(jitllm:tier_requests_met_targets_total[1m]).
  for (const auto& [family, help, met] :
       {std::tuple{"tier_requests_finished", "Generations that finished normally, per service tier.", false},
        std::tuple{"tier_requests_met_targets", "Finished generations that met their tier's TTFT and TPOT targets.",
                   true}}) {
    page.family(family, "counter", help);
    for (const auto& [model, c] : counters) {
      for (ServiceTier t : kAllServiceTiers) {
        page.sample(std::string(family) + "_total", modelLabel(model) + ",tier=\"" + std::string(tierName(t)) + "\"",
                    double(met ? c.tierMet[size_t(t)] : c.tierFinished[size_t(t)]));
      }
    }
  }
}

void latencyHistograms(Page& page, const Counters& counters) {
  auto histogram = [&](const char* name, const char* help, auto field) {
    page.family(name, "histogram", help);
    for (const auto& [model, c] : counters) page.histogram(name, modelLabel(model), field(c));
  };
  histogram("time_to_first_token_seconds", "From a generation's arrival to its first token.",
            [](const auto& c) -> const LatencyHistogram& { return c.timeToFirstToken; });
  histogram("time_per_output_token_seconds", "Decode time per token after the first.",
            [](const auto& c) -> const LatencyHistogram& { return c.timePerOutputToken; });
  histogram("e2e_request_latency_seconds", "From a generation's arrival to its end (finished ones).",
            [](const auto& c) -> const LatencyHistogram& { return c.endToEnd; });
  histogram("migration_pause_seconds", "How long a migration's commit held its model's replies.",
            [](const auto& c) -> const LatencyHistogram& { return c.migrationPause; });
}

void pagingCounters(Page& page, const Counters& counters) {
  page.family("page_outs", "counter",
              "Weights moved off their devices (kind=weights), idle KV parked in host RAM (kind=kv).");
  for (const auto& [model, c] : counters) {
    page.sample("page_outs_total", modelLabel(model) + ",kind=\"weights\"", double(c.weightPageOuts));
    page.sample("page_outs_total", modelLabel(model) + ",kind=\"kv\"", double(c.kvPageOuts));
  }
  page.family("page_ins", "counter", "Weights brought home (kind=weights), parked KV brought back (kind=kv).");
  for (const auto& [model, c] : counters) {
    page.sample("page_ins_total", modelLabel(model) + ",kind=\"weights\"", double(c.weightPageIns));
    page.sample("page_ins_total", modelLabel(model) + ",kind=\"kv\"", double(c.kvPageIns));
  }
}

void kvGauges(Page& page, const std::map<std::string, ModelSnapshot>& models) {
  page.family("kv_pages_used", "gauge", "KV cache pages in use.");
  for (const auto& [name, snap] : models) {
    for (const auto& p : snap.kvPools)
      page.sample("kv_pages_used", modelLabel(name) + "," + deviceLabel(p.device), double(p.pagesInUse));
  }
  page.family("kv_pages_total", "gauge", "KV cache pages the model's pool holds on the device (it grows by chunks).");
  for (const auto& [name, snap] : models) {
    for (const auto& p : snap.kvPools) {
      page.sample("kv_pages_total", modelLabel(name) + "," + deviceLabel(p.device), double(p.pagesReserved));
    }
  }
}

void deviceGauges(Page& page, DaemonCore& core) {
  const auto devices = core.deviceTable().all();
  page.family("device_memory_used_bytes", "gauge", "Device memory jitllmd holds.");
  for (const auto& d : devices)
    page.sample("device_memory_used_bytes", deviceLabel(d.device->info().id.str()), double(d.device->memoryUsed()));
  page.family("device_memory_total_bytes", "gauge", "Device memory jitllmd may use (its budget).");
  for (const auto& d : devices) {
    page.sample("device_memory_total_bytes", deviceLabel(d.device->info().id.str()),
                double(d.device->info().memoryBudget));
  }
  page.family("device_online", "gauge", "1 while the device is usable, 0 once it went away.");
  for (const auto& d : devices) page.sample("device_online", deviceLabel(d.device->info().id.str()), d.online ? 1 : 0);
  // Telemetry the scheduler read (NVML, or a script); devices without it have no sample.
  page.family("device_temperature_celsius", "gauge", "Device temperature, where telemetry knows it.");
  for (const auto& d : devices) {
    if (!std::isnan(d.readings.temperatureC)) {
      page.sample("device_temperature_celsius", deviceLabel(d.device->info().id.str()), d.readings.temperatureC);
    }
  }
  page.family("device_utilization_ratio", "gauge", "Device utilisation (0 to 1), where telemetry knows it.");
  for (const auto& d : devices) {
    if (!std::isnan(d.readings.utilization)) {
      page.sample("device_utilization_ratio", deviceLabel(d.device->info().id.str()), d.readings.utilization);
    }
  }
}

}  // namespace

std::string renderMetrics(DaemonCore& core) {
  Page page;
  const Counters counters = core.metrics().snapshot();
  std::map<std::string, ModelSnapshot> models;
  std::map<std::string, size_t> jobs;
  for (const auto& host : core.models()) {
    models[host->name()] = host->snapshot();
    jobs[host->name()] = host->jobCount();
  }
  requestGauges(page, models, jobs);
  servingCounters(page, counters);
  latencyHistograms(page, counters);
  pagingCounters(page, counters);
  kvGauges(page, models);
  deviceGauges(page, core);
  return page.text();
}

}  // namespace jitllm::server::http
