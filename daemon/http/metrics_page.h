// GET /metrics: the daemon's state and what it has served, in Prometheus' text exposition format
// (version 0.0.4), every name prefixed `jitllm:` as vLLM prefixes its own `vllm:`.
//
// Counters and histograms come from ServingMetrics (recorded by the model workers); gauges are
// read now from the resident models (requests running and waiting, KV pages) and the device
// table (memory, temperature and utilisation where telemetry knows them). Labels: `model`,
// `device` (and `kind` for paging: weights or kv). docs/api.md lists every metric.
//
// Thread-safety: a pure function of what it reads; any thread.
#pragma once

#include <string>

#include "daemon/server/daemon_core.h"

namespace jitllm::server::http {

std::string renderMetrics(DaemonCore& core);

}  // namespace jitllm::server::http
