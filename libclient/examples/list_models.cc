// jitllm-list-models [SOCKET]: prints the models jitllmd holds, one per line, with their
// sessions. The whole program a synchronous client needs: connect, ask, handle Error.
#include <jitllm/client.h>

#include <cstdio>

int main(int argc, char** argv) {
  try {
    auto client = jitllm::client::Client::connect(argc > 1 ? argv[1] : "");
    for (const auto& model : client.models()) {
      std::printf("%s  %s  %u layers  %zu sessions\n", model.name.c_str(), model.architecture.c_str(), model.layers,
                  model.sessions.size());
    }
    return 0;
  } catch (const jitllm::client::Error& e) {
    std::fprintf(stderr, "jitllm-list-models: %s (%s)\n", e.what(), jitllm::client::errorKindName(e.kind()));
    return 1;
  }
}
