// jitllm-mkmodel: writes a random-weight GGUF in a real model's shape and weight type.
#include <cstdio>
#include <iostream>

#include "base/error.h"
#include "tools/command_line.h"
#include "tools/random_model.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-mkmodel SHAPE TYPE OUT.gguf [--seed N] [--shared DIR]
  SHAPE   micro | tiny | llama-3.2-1b | llama-3.2-3b | llama-3.1-8b | qwen2.5-0.5b | qwen3-micro |
          qwen3-0.6b | qwen3-4b | granite-micro | granite-3.3-2b | phi3-micro | phi-3.5-mini |
          phi4-micro | phi-4-mini | gemma3-micro | gemma3-1b | gemma3-4b
  TYPE    f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k_s | q4_k_m | q5_k_s | q5_k_m | q6_k
  --seed N      weight seed (default 0): the same seed gives the same file, byte for byte
  --shared DIR  the shared/ folder holding vocab/ and models/ (default ../shared)
  --vocab-only  the metadata only, no tensors: a vocabulary file as llama.cpp's ggml-vocab-*.gguf
)";

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
  std::vector<std::string> positional;
  tools::RandomModelSpec spec;
  spec.sharedDir = "../shared";
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "--seed")
      spec.seed = cl.number<uint64_t>(a);
    else if (a == "--shared")
      spec.sharedDir = cl.value(a);
    else if (a == "--vocab-only")
      spec.vocabOnly = true;
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-')
      throw tools::UsageError("unknown option " + a);
    else
      positional.push_back(a);
  }
  if (positional.size() != 3) throw tools::UsageError("expected SHAPE TYPE OUT.gguf");
  auto shape = tools::findShape(positional[0]);
  if (!shape) throw tools::UsageError("unknown shape '" + positional[0] + "'");
  auto mix = tools::findMix(positional[1]);
  if (!mix) throw tools::UsageError("unknown type '" + positional[1] + "'");
  spec.shape = *shape;
  spec.mix = *mix;
  tools::writeRandomModel(spec, positional[2]);
  std::printf("wrote %s: %s %s, seed %llu\n", positional[2].c_str(), shape->name.c_str(), mix->name.c_str(),
              (unsigned long long)spec.seed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-mkmodel", kUsage, run, argc, argv); }
