// Names of the enums in client_types.h, as the schema spells them (used in JSON and messages).
#include "jitllm/client_types.h"

namespace jitllm::client {

const char* stopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxTokens: return "maxTokens";
    case StopReason::kEndOfGeneration: return "endOfGeneration";
    case StopReason::kStopString: return "stopString";
    case StopReason::kContextFull: return "contextFull";
    case StopReason::kCancelled: return "cancelled";
  }
  return "maxTokens";
}

const char* eventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kDaemon: return "daemon";
    case EventKind::kDevice: return "device";
    case EventKind::kModel: return "model";
    case EventKind::kSession: return "session";
    case EventKind::kMigration: return "migration";
  }
  return "daemon";
}

}  // namespace jitllm::client
