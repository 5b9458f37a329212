// Drives a model the way the daemon's step loop does - several sessions decoding greedily, one
// token each per step - and performs live migrations at chosen steps, preparing between steps
// and committing at a token boundary. The CPU migration tests and the GPU suites share it, so
// every backend is held to the same scenario.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/live_migration.h"
#include "engine/runtime/model.h"

namespace jitllm::testing {

struct MigrationPoint {
  int step = 0;       // the migration starts before this step
  std::string range;  // parseUnitRange syntax; "" = every unit
  Device* target = nullptr;
  bool precopy = true;
};

struct MigratedRun {
  std::vector<std::vector<float>> logits;      // per step: every session's logits, in order
  std::vector<std::vector<int32_t>> tokens;    // per session: prompt then generated tokens
  std::vector<runtime::MigrationStats> stats;  // per committed migration
  std::vector<int> commitSteps;                // the step before which each committed
  // After each commit: the pages the pools hand out are exactly the pages the sessions hold.
  std::vector<bool> poolsBalanced;
};

// Greedy argmax, ties to the lowest id (as the sampler does at temperature 0).
inline int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++) {
    if (row[i] > row[best]) best = i;
  }
  return int32_t(best);
}

// Pages in use over every pool of the model.
inline size_t pagesInUse(const runtime::Model& model) {
  size_t n = 0;
  for (const runtime::KvPagePool* p : model.kvPools()) n += p->pagesInUse();
  return n;
}

// Step 0 prefills every prompt; each later step feeds each session its last token. A migration
// prepares one slice per step and commits once prepared, before the next step.
inline MigratedRun runWithMigrations(runtime::Model& model, const std::vector<std::vector<int32_t>>& prompts, int steps,
                                     const std::vector<MigrationPoint>& points) {
  MigratedRun run;
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  for (size_t i = 0; i < prompts.size(); i++) sessions.push_back(model.createSession(model.config().contextLength));
  run.tokens = prompts;
  const int64_t V = model.config().vocabSize;
  std::unique_ptr<runtime::LiveMigration> migration;
  bool prepared = false;
  auto commit = [&](int step) {
    migration->commit();
    run.stats.push_back(migration->stats());
    run.commitSteps.push_back(step);
    migration.reset();
    size_t held = 0;
    for (const auto& s : sessions) held += s->pageCount();
    run.poolsBalanced.push_back(held == pagesInUse(model));
  };
  size_t nextPoint = 0;
  for (int step = 0; step < steps; step++) {
    if (migration && prepared) commit(step);
    if (!migration && nextPoint < points.size() && points[nextPoint].step <= step) {
      const MigrationPoint& p = points[nextPoint++];
      runtime::MigrationOptions o;
      o.units = runtime::parseUnitRange(p.range, int(model.config().layers));
      o.target = p.target;
      o.precopy = p.precopy;
      o.stepBytes = 8 * model.kvLayout().pageBytes();  // small slices: pre-copy spans several steps
      migration = std::make_unique<runtime::LiveMigration>(model, o);
      prepared = false;
    }
    if (migration && !prepared) prepared = migration->prepareStep();

    std::vector<runtime::SequenceInput> inputs;
    for (size_t i = 0; i < sessions.size(); i++) {
      const auto& t = run.tokens[i];
      std::span<const int32_t> feed = step == 0 ? std::span<const int32_t>(t) : std::span<const int32_t>(&t.back(), 1);
      inputs.push_back({sessions[i].get(), feed, false});
    }
    std::vector<float> logits;
    model.forward(inputs, logits);
    for (size_t i = 0; i < sessions.size(); i++) run.tokens[i].push_back(argmax(logits.data() + int64_t(i) * V, V));
    run.logits.push_back(std::move(logits));
  }
  if (migration) commit(steps);
  return run;
}

}  // namespace jitllm::testing
