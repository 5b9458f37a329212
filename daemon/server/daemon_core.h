// What jitllmd owns, independent of how clients reach it: its devices, the resident models, the
// event hub and the access policy. The RPC layer (rpc_service.h) and the signal/timer loop
// (jitllmd_main.cc) both drive it.
//
// Loading parses and binds a model (seconds for big files) on the caller's thread: the RPC layer
// runs it on a loader thread so the RPC loop stays responsive.
//
// Ownership: owns devices and ModelHosts; a ModelHost handed out by find() stays valid while the
// caller holds it, even if it is unloaded meanwhile (its jobs then fail with DISCONNECTED).
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/server/access_policy.h"
#include "daemon/server/daemon_config.h"
#include "daemon/server/device_table.h"
#include "daemon/server/event_hub.h"
#include "daemon/server/model_host.h"
#include "daemon/server/policy_control.h"
#include "daemon/server/serving_metrics.h"
#include "engine/devices/builtin_backends.h"
#include "kernels/backend.h"
#include "kernels/device.h"
#include "policies/load_placement.h"

namespace jitllm::server {

struct LoadRequest {
  std::string path;  // a path under model_dirs, or empty when fd is given
  int fd = -1;       // an open descriptor the client passed (still owned by the caller)
  std::string name;  // empty: from the file
  int64_t contextSize = 0;
  std::vector<DeviceId> devices;           // placement hint, e.g. cpu:0, cpu:1; empty: all the daemon's devices
  std::optional<KvPrecision> kvPrecision;  // unset: the default (f32)
  size_t maxDeviceBytes = 0;               // cap on this model's bytes per GPU (--max-vram); 0: none
};

using LoadProgress = std::function<void(const std::string& stage, uint64_t done, uint64_t total)>;

class DaemonCore final {
 public:
  explicit DaemonCore(DaemonConfig config);
  ~DaemonCore();

  DaemonConfig config() const;
  // Applies a re-read config: what can change live (admin group, limits for new models, log
  // level); returns what needs a restart to take effect.
  std::vector<std::string> reload(const DaemonConfig& fresh);

  EventHub& events() { return events_; }
  // What has been served (tokens, latencies, migrations, paging), for /metrics.
  const ServingMetrics& metrics() const { return metrics_; }
  const AccessPolicy& access() const { return access_; }
  // The online devices (see DeviceTable for those that went away).
  std::vector<Device*> devices() const { return devices_.online(); }
  DeviceTable& deviceTable() { return devices_; }
  // An online device; Error(FAILED) naming the devices there are when none is called `id`, or
  // saying why it is offline.
  Device& device(const DeviceId& id) const;
  // The same for an id as text: DeviceId::parse's grammar, its errors.
  Device& device(std::string_view id) const { return device(DeviceId::parse(id)); }

  // Hot-plug. A device went away: it goes offline, and every model with units on it is re-placed
  // (ModelHost::deviceLost) on the best device left. Returns once every model has been re-placed;
  // false when the device was already offline (or unknown).
  bool deviceLost(const DeviceId& id, const std::string& why);
  // A device (back) online: placement and the scheduler's policies may use it again.
  bool deviceArrived(const DeviceId& id, const std::string& why);
  // Re-enumeration (hot-plug of devices the daemon did not have): compares what is plugged in now
  // with the table - a device new to it is opened, probed and added (device.added); one that
  // went away and is there again comes back online (opened again unless it still answers); an
  // online one its backend no longer lists is lost (deviceLost). Devices match by UUID. Without
  // an enumerator (the default unless `devices = auto`) it does nothing.
  struct Rescan {
    std::vector<DeviceId> added, back, lost;
  };
  Rescan rescanDevices();
  using DeviceEnumerator = std::function<Enumeration()>;
  void setDeviceEnumerator(DeviceEnumerator enumerator);
  bool rescans() const;
  // A step of `model` failed with DISCONNECTED: the devices it uses that stopped answering are lost.
  void deviceFault(const std::string& model);
  // Where a page-out moves a model: the first online CPU device other than `except` (the CPU reads
  // weights in place from the mapped file, so device memory is freed and the model stays usable);
  // null when there is none.
  Device* pageOutTarget(const Device* except = nullptr) const;
  // KV the resident models were placed with room for on `device` and do not use yet.
  size_t promised(const std::string& device) const;

  std::shared_ptr<ModelHost> load(const LoadRequest& request, const LoadProgress& progress);
  // Unloads the model, and its replicas with it.
  void unload(const std::string& name);
  // Error(FAILED) naming the loaded models when there is none called `name`.
  std::shared_ptr<ModelHost> find(const std::string& name) const;
  // Data parallelism: a second copy of a loaded model on `device` (every unit there), sharing its
  // file mapping, options and tier targets, named NAME#2 (NAME#3, ...). Requests for NAME go to
  // whichever of it and its replicas has the fewest jobs (route()); unload NAME#N drops one, unload
  // NAME all. Blocks until its kernels are ready; Error(OVERLOADED) when it does not fit there.
  std::shared_ptr<ModelHost> replicate(const std::string& name, const DeviceId& device);
  // The host a new request for `name` goes to: the model or one of its replicas, the one with the
  // fewest jobs (the model on a tie). An idle session kept for a follow-up stays with its host, so
  // a follow-up routed elsewhere is prefilled again there. Error(FAILED) as find().
  std::shared_ptr<ModelHost> route(const std::string& name) const;
  std::vector<std::shared_ptr<ModelHost>> models() const;

  // Refuses new generations from now on (Error(DISCONNECTED): the daemon is stopping).
  void stopAccepting();
  // A generation received and on its way to a model (GenerationIntake: its prompt being
  // prepared): a drain waits for it as for a running one, so a request that came before the stop
  // is served. Counted while the guard lives.
  class AdmissionGuard {
   public:
    explicit AdmissionGuard(DaemonCore& core) : core_(core) {}
    AdmissionGuard(const AdmissionGuard&) = delete;
    AdmissionGuard& operator=(const AdmissionGuard&) = delete;
    ~AdmissionGuard();

   private:
    DaemonCore& core_;
  };
  // Error(DISCONNECTED) once the daemon stops accepting; else the new request's guard (taken
  // under the same lock as stopAccepting(), so a drain sees every request admitted before it).
  std::shared_ptr<AdmissionGuard> admitGeneration();
  bool accepting() const;
  // Waits up to `grace` for running generations, then unloads everything (failing what is left).
  // Returns the number of generations that had to be cancelled.
  size_t drain(std::chrono::milliseconds grace);

  // Replies being streamed to clients. A stopping daemon keeps its RPC loop running until they
  // are all sent, so a generation that finished in the grace period reaches its client.
  class ReplyGuard {
   public:
    explicit ReplyGuard(std::atomic<int>& n) : n_(&n) { n_->fetch_add(1); }
    ReplyGuard(const ReplyGuard&) = delete;
    ReplyGuard& operator=(const ReplyGuard&) = delete;
    ~ReplyGuard() { n_->fetch_sub(1); }

   private:
    std::atomic<int>* n_;
  };
  ReplyGuard replyStarted() { return ReplyGuard(activeReplies_); }
  int activeReplies() const { return activeReplies_.load(); }

  // The scheduler, once it runs (null: none). The caller keeps it alive until it sets null again.
  void setPolicyControl(PolicyControl* control);
  // Error(UNIMPLEMENTED) when there is no scheduler.
  PolicyControl& policyControl() const;

  // A one-line summary for sd_notify STATUS=.
  std::string statusLine() const;

 private:
  // Registers a bound model under `name` and waits for its kernels (load and replicate).
  std::shared_ptr<ModelHost> start(const std::string& name, const std::string& source,
                                   std::unique_ptr<runtime::Model> model, const ModelHostOptions& options,
                                   const LoadProgress& progress);
  // Path validation for load-by-path: inside a model dir and readable by `uid`.
  std::string resolveModelPath(const std::string& path) const;
  // Placement on load: gathers a policies::LoadSnapshot, carries out policies::planLoad's plan
  // (page-outs, then the plan made again from what is free) and returns each unit's device index
  // (`streamed`: the blocks that stream); Error(OVERLOADED) with the plan's words when it does not fit.
  std::vector<int> placeNewModel(const std::string& name, const std::vector<Device*>& candidates, bool evenSpread,
                                 const std::vector<size_t>& weightBytes, size_t kvPerTokenPerBlock,
                                 int64_t contextTokens, size_t workspaceBytes, size_t maxDeviceBytes,
                                 std::vector<bool>& streamed);
  // Every resident model as a load sees it: what paging it out would free on each of `on`.
  std::vector<policies::LoadedModel> loadedModels(const std::vector<policies::PlacementDevice>& on) const;
  policies::LoadedModel loadedModel(const ModelHost& host, const std::vector<policies::PlacementDevice>& on) const;
  // Pages the room's models out of `device`, in order, until room.bytes are free there; one that
  // may no longer make room there (policies::mayMakeRoom, nothing left there) is passed over.
  void makeRoom(Device& device, const policies::RoomToMake& room, const std::string& forModel);
  // "NVIDIA H200, 128000 MiB"
  static std::string describe(const Device& d);
  // Measures (or reads from the cache) the device's decode speed for placement; the text for its
  // device.added event (", decode probe 19.2 GB/s"). Identical devices share one measurement.
  std::string probeSpeed(Device& d);
  void deviceArrivedAlready(const DeviceId& id, const std::string& why);  // the event and log line
  // `device` as placement sees it: its speed and what is free there, less what is promised.
  policies::PlacementDevice view(const Device& device) const;

  mutable std::mutex mutex_;
  DaemonConfig config_;
  EventHub events_;
  ServingMetrics metrics_;  // before devices_ and models_: their workers record into it
  AccessPolicy access_;
  DeviceTable devices_;
  std::map<std::string, std::shared_ptr<ModelHost>> models_;
  bool accepting_ = true;
  size_t admissions_ = 0;  // AdmissionGuards alive (guarded by mutex_)
  std::condition_variable admissionsEnded_;
  std::atomic<int> activeReplies_{0};
  PolicyControl* policyControl_ = nullptr;  // guarded by mutex_
  std::vector<std::thread> faultThreads_;   // deviceLost() calls deviceFault() started; guarded by mutex_
  std::mutex speedsMutex_;
  std::map<std::string, double> speeds_;  // decode GB/s per runtime::speedKey
  mutable std::mutex rescanMutex_;        // one re-enumeration at a time
  DeviceEnumerator enumerator_;           // guarded by rescanMutex_
};

}  // namespace jitllm::server
