#!/usr/bin/env bash
# make_goldens.sh — regenerates, from scratch, every llama.cpp golden under tests/goldens/.
#
# What it makes (committed, in tests/goldens/):
#   stories260K_greedy.txt        llama.cpp greedy decode (-n 200) of ../shared/models/stories260K.gguf
#                                 for 5 prompts; format documented in the file's # header.
#   micro/micro-{f32,f16,bf16,q8_0,q4_0,q4_k_m,q5_k_m,q6_k}.gguf
#                                 random-weight `micro` shape (512-token vocab, seed 0) from
#                                 ../shared/peer/mkmodel.py; f32/f16 written by mkmodel.py, the rest (bf16 too)
#                                 by llama-quantize from the F32 file.
#   micro/tokens.txt              the 64-id teacher-forcing sequence (one line of ids).
#   micro/<type>.truth.bin        float64 ground truth (reference.py), float32 [64][512], row-major.
#   micro/<type>.llamacpp.bin     llama.cpp `llama-greedy --score` logits, float32 [64][512].
#   micro/llamacpp_vs_truth.txt   NMSE and top-1 of llama.cpp vs the truth, per type.
#   qwen2/*, qwen3/*, granite/*, phi3/*, phi4/*, gemma3/*
#                                 llama.cpp logits on our generator's qwen2.5-0.5b, qwen3-micro, gemma3-micro,
#                                 (and for the last four their Q4_K_M files' float64 truth, see 5.)
#                                 granite-micro and phi3-micro f16 models (see 3.)
# STORIES=0, MICRO=0, TINY=0, QWEN2=0, QWEN3=0, GRANITE=0, PHI3=0, PHI4=0, GEMMA3=0, QUANT_TRUTH=0,
# FORM_VOCAB=0 skip a part (e.g. to add one golden set alone).
# What it makes (NOT committed, too big: ~8 MB of logits per file) in $GOLDENS_TINY
# (default /work/goldens-tiny):
#   the same for the `tiny` shape (32000-token vocab): tiny-<type>.gguf, tokens.txt,
#   <type>.truth.bin, <type>.llamacpp.bin, llamacpp_vs_truth.txt.  Skip it with TINY=0.
#
# Needs: ../shared/peer/setup already run (llama-greedy, llama-quantize and gguf-py in
#   $JITLLM_PEER_DIR, default ~/.cache/jitllm-peer), and /usr/bin/python3 with numpy
#   (scripts/install-deps.sh --goldens). On a CPU with AMX it builds a no-AMX copy of the
#   peer tools once (see below), since llama.cpp's AMX kernels crash on this machine.
# Deterministic: fixed seeds, fixed prompts, fixed token sequences, 2 threads. llama.cpp's logits
#   depend on the CPU's SIMD paths, so *.llamacpp.bin may differ in the last bits on another CPU.
# usage: tests/goldens/make_goldens.sh   (from anywhere; ~30 s on 2 cores, + ~4 min once for the no-AMX build)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)                 # tests/goldens
REPO=$(cd "$HERE/../.." && pwd)
SHARED=$(cd "$REPO/../shared" && pwd)
export JITLLM_PEER_DIR=${JITLLM_PEER_DIR:-$HOME/.cache/jitllm-peer}
# llama.cpp v0.4.0's AMX kernels (compiled in by -march=native on a CPU with amx_int8) crash with
# SIGILL/SIGSEGV in ggml_backend_amx_mul_mat on every quantized model here (cf. llama.cpp PR #26954).
# So when the peer build has them, use (building it once, ~4 min on 2 cores, from the same source)
# a copy compiled with -mno-amx-int8 in ${JITLLM_PEER_DIR}-noamx: identical but for the AMX path.
if grep -qa ggml_backend_amx_mul_mat "$JITLLM_PEER_DIR/bin/libggml-cpu.so" 2>/dev/null; then
  echo "peer build has AMX kernels: using ${JITLLM_PEER_DIR}-noamx" >&2
  JITLLM_PEER_BUNDLE=$JITLLM_PEER_DIR/src JITLLM_PEER_DIR=${JITLLM_PEER_DIR}-noamx \
    PEER_CMAKE_ARGS="-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8" "$SHARED/peer/setup" >&2
  export JITLLM_PEER_DIR=${JITLLM_PEER_DIR}-noamx
  if grep -qa ggml_backend_amx_mul_mat "$JITLLM_PEER_DIR/bin/libggml-cpu.so"; then echo "AMX still in $JITLLM_PEER_DIR" >&2; exit 1; fi
fi
BIN=$JITLLM_PEER_DIR/bin
PY=/usr/bin/python3
TINY_DIR=${GOLDENS_TINY:-/work/goldens-tiny}
TYPES="f32 f16 bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k"
tools=llama-greedy
[[ ${MICRO:-1} != 0 || ${TINY:-1} != 0 ]] && tools="$tools llama-quantize"
for t in $tools; do
  [[ -x $BIN/$t ]] || { echo "missing $BIN/$t: run ../shared/peer/setup first" >&2; exit 1; }
done
$PY -c 'import numpy' || { echo "/usr/bin/python3 lacks numpy: scripts/install-deps.sh --goldens" >&2; exit 1; }

# ---------------------------------------------------------------- 1. stories260K greedy goldens
if [[ ${STORIES:-1} != 0 ]]; then
$PY - "$BIN/llama-greedy" "$SHARED/models/stories260K.gguf" "$HERE/stories260K_greedy.txt" <<'EOF'
import subprocess, sys
greedy, model, out = sys.argv[1:4]
# "Sara had a red ball. She" is kept on purpose: at generated token 66 llama.cpp's decode path
# picks 448 where the float64 truth (reference.py) and llama.cpp's own --score pass pick 442, by
# a margin of 8e-4 in the logits; the test checks jitllm follows the truth there.
PROMPTS = ["Once upon a time", "Lily and Tom went to the park", "The little dog",
           "One day, a big bear", "Sara had a red ball. She", "Tim and his mom",
           "The sun was shining", "Once there was a cat", "Ben liked to run", "A little bird",
           "The girl found a box"]
N = 200
def cesc(b):
    s = []
    for c in b:
        if c == 0x5C: s.append("\\\\")
        elif c == 0x0A: s.append("\\n")
        elif 0x20 <= c < 0x7F: s.append(chr(c))
        else: s.append("\\x%02x" % c)
    return "".join(s)
lines = [
    "# llama.cpp greedy goldens for ../shared/models/stories260K.gguf (made by tests/goldens/make_goldens.sh)",
    "# llama.cpp v0.4.0 (node-llama-cpp 3.21.1), tool: llama-greedy MODEL -p PROMPT -n %d (2 threads)" % N,
    "# Prompt tokenization: llama_tokenize(add_special=true, parse_special=true): BOS (1) is prepended",
    "#   (the model's add_bos), and SentencePiece adds a leading space to the text.",
    "# Format: lines starting with '#' and blank lines are comments. One block per prompt, 4 lines:",
    "#   prompt: <prompt text, C-escaped>",
    "#   prompt_tokens: <ids, space separated, BOS included>          (verbatim from llama-greedy)",
    "#   greedy_tokens: <ids generated greedily, space separated>     (verbatim from llama-greedy)",
    "#   text: <detokenized generated tokens only (not the prompt), C-escaped>",
    "# Generation stops after N=%d tokens or at the first end-of-generation token (EOS 2), which is" % N,
    "#   then the LAST id of greedy_tokens and is rendered in text as its piece (special tokens rendered).",
    "# Each piece is llama_token_to_piece(vocab, id, lstrip=0, special=true); text is their concatenation.",
    "# C-escaping (one line, ASCII only): '\\\\' = backslash, '\\n' = newline (0x0a), '\\xHH' (exactly two",
    "#   lowercase hex digits) = any other byte outside 0x20..0x7e; every other character is itself.",
    "# Argmax ties go to the lowest id. Each key is followed by exactly one space before its value.",
    "",
]
for p in PROMPTS:
    r = subprocess.run([greedy, model, "-p", p, "-n", str(N)], capture_output=True, check=True).stdout
    head, rest = r.split(b"\ntext: ", 1)
    text, timing = rest.rsplit(b"\ntiming: ", 1)
    pt, gt = head.decode().split("\n")
    assert pt.startswith("prompt_tokens:") and gt.startswith("greedy_tokens:"), r
    lines += ["prompt: " + cesc(p.encode()), pt, gt, "text: " + cesc(text), ""]
open(out, "w").write("\n".join(lines))
print("wrote", out)
EOF
fi

# ---------------------------------------------------------------- 2./3. fidelity goldens per shape
# fidelity SHAPE DIR PREFIX VOCAB
fidelity() {
  local shape=$1 dir=$2 pre=$3 nv=$4 t
  mkdir -p "$dir"
  $PY "$SHARED/peer/mkmodel.py" "$shape" "$dir/$pre-f32.gguf" --f32 --seed 0
  $PY "$SHARED/peer/mkmodel.py" "$shape" "$dir/$pre-f16.gguf" --seed 0
  for t in bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k; do
    "$BIN/llama-quantize" "$dir/$pre-f32.gguf" "$dir/$pre-$t.gguf" "${t^^}" 2 >"$dir/quantize-$t.log" 2>&1 \
      || { tail -20 "$dir/quantize-$t.log"; exit 1; }
    grep -iE "quant size|fallback|cannot be quantized|not divisible" "$dir/quantize-$t.log" | sed "s/^/  [$t] /" || true
    rm -f "$dir/quantize-$t.log"
  done
  # teacher-forcing sequence: 64 ids = llama-greedy's prompt tokens (BOS + "Once upon a time") followed
  # by its greedy continuation on the F32 model; if that ends early (EOS) or is degenerate (< 16 distinct
  # ids), a fixed pseudo-random sequence: BOS then 63 ids in 3..nv-1 (numpy default_rng(1234)).
  local out ids
  out=$("$BIN/llama-greedy" "$dir/$pre-f32.gguf" -p "Once upon a time" -n 64)
  ids=$(GREEDY_OUT=$out $PY - "$nv" <<'EOF'
import os, sys, numpy as np
nv = int(sys.argv[1])
out = os.environ["GREEDY_OUT"].split("\n")
pt = [int(x) for x in out[0].split(":")[1].split()]
gt = [int(x) for x in out[1].split(":")[1].split()]
seq = (pt + gt)[:64]
if len(seq) < 64 or 2 in gt[:64 - len(pt)] or len(set(seq)) < 16:
    seq = [1] + np.random.default_rng(1234).integers(3, nv, 63).tolist()
    print("degenerate greedy sequence; using pseudo-random ids", file=sys.stderr)
print(" ".join(map(str, seq)))
EOF
)
  echo "$ids" >"$dir/tokens.txt"
  for t in $TYPES; do
    $PY "$SHARED/peer/reference.py" "$dir/$pre-$t.gguf" -t "$ids" --logits "$dir/$t.truth.bin"
    rm -f "$dir/$t.llamacpp.bin"                      # --logits appends
    "$BIN/llama-greedy" "$dir/$pre-$t.gguf" --score -t "$ids" --logits "$dir/$t.llamacpp.bin" >/dev/null
  done
  {
    echo "# llama.cpp v0.4.0 (llama-greedy --score, 2 threads) vs float64 truth (reference.py), shape $shape,"
    echo "# 64 teacher-forced positions (tokens.txt), vocab $nv. nmse = sum((l-t)^2)/sum(t^2); top1 = argmax agreement."
    echo "type nmse top1"
    for t in $TYPES; do
      $PY "$SHARED/peer/reference.py" --compare "$dir/$t.truth.bin" "$dir/$t.llamacpp.bin" --vocab "$nv" \
        | sed -E "s/^[^:]*: nmse ([^ ]+) top1 ([^ ]+)$/$t \1 \2/"
    done
  } >"$dir/llamacpp_vs_truth.txt"
  cat "$dir/llamacpp_vs_truth.txt"
}

if [[ ${MICRO:-1} != 0 ]]; then fidelity micro "$HERE/micro" micro 512; fi
if [[ ${TINY:-1} != 0 ]]; then fidelity tiny "$TINY_DIR" tiny 32000; fi

# ---------------------------------------------------------------- 3. qwen2 / qwen3 teacher-forced logits
# The models come from OUR generator (jitllm-mkmodel SHAPE f16, seed 0: the tests re-make them
# byte for byte), scored by llama.cpp. Their full logits (64 x 151936 floats for qwen, 39 MB) are
# too big to commit, so we keep every 37th vocabulary column plus each position's argmax:
#   DIR/tokens.txt          the 64 ids: a tokenized sentence, then fixed pseudo-random ids
#   DIR/llamacpp_cols.bin   float32 [64][ceil(vocab / 37)]: llama.cpp's logits at columns 0, 37, 74, ...
#   DIR/llamacpp_argmax.txt one line per position: llama.cpp's argmax id
# (A random tied-embedding model repeats its input greedily, so its own greedy text is useless.)
#   qwen2/  qwen2.5-0.5b          (QWEN2=0 skips it)
#   granite/ granite-micro: 4 layers with Granite 3.3's multipliers, the refact tokenizer
#           (GRANITE=0 skips it)
#   phi3/   phi3-micro: fused QKV and gate/up, LongRoPE's long factors (llama.cpp at --ctx 8192,
#           past the original 4096) (PHI3=0 skips it)
#   phi4/   phi4-micro: as phi3-micro with grouped-query heads, a tied output, rope over 48 of 64
#           dims and Phi-4's tokenizer form (gpt-4o pre-tokenizer) (PHI4=0 skips it)
#   qwen3/  qwen3-micro: 4 layers, 128-wide heads on a 256-wide model, q/k norms (QWEN3=0 skips it)
#   gemma3/ gemma3-micro: 6 layers (5 with a 24-token sliding window, 1 global), post norms, GEGLU;
#           the 64 positions reach 2.6 windows (GEMMA3=0 skips it)
JITLLM_MKMODEL=${JITLLM_MKMODEL:-$REPO/build/bin/jitllm-mkmodel}
# teacherForced SHAPE DIR VOCAB IDS_BELOW [CTX]: the ids after the prompt are drawn below IDS_BELOW;
# CTX, when given, is llama.cpp's context size (phi3 picks its LongRoPE factors by it).
teacherForced() {
  local shape=$1 dir=$2 nv=$3 below=$4 ctx=${5:-} model prompt ids
  [[ -x $JITLLM_MKMODEL ]] || { echo "missing $JITLLM_MKMODEL: build jitllm first" >&2; exit 1; }
  mkdir -p "$dir"
  model=$(mktemp -d)/model-f16.gguf
  "$JITLLM_MKMODEL" "$shape" f16 "$model" --seed 0 --shared "$SHARED" >&2
  prompt=$("$BIN/llama-greedy" "$model" -p "The quick brown fox jumps over the lazy dog. In the beginning" -n 1 2>/dev/null |
    sed -n 's/^prompt_tokens: //p')
  ids=$($PY -c "
import sys
ids = sys.argv[1].split()
x = 12345
while len(ids) < 64:
    x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
    ids.append(str((x >> 33) % int(sys.argv[2])))
print(' '.join(ids))" "$prompt" "$below")
  echo "$ids" >"$dir/tokens.txt"
  rm -f "$model.logits"
  "$BIN/llama-greedy" "$model" --score -t "$ids" --logits "$model.logits" --threads 2 ${ctx:+--ctx $ctx} >/dev/null 2>&1
  $PY - "$model.logits" "$dir" "$nv" <<'PYEOF'
import sys, numpy as np
l = np.fromfile(sys.argv[1], np.float32).reshape(64, int(sys.argv[3]))
np.ascontiguousarray(l[:, ::37]).tofile(sys.argv[2] + "/llamacpp_cols.bin")
open(sys.argv[2] + "/llamacpp_argmax.txt", "w").write("\n".join(str(int(i)) for i in l.argmax(1)) + "\n")
PYEOF
  rm -rf "$(dirname "$model")"
}
if [[ ${QWEN2:-1} != 0 ]]; then teacherForced qwen2.5-0.5b "$HERE/qwen2" 151936 151643; fi
if [[ ${QWEN3:-1} != 0 ]]; then teacherForced qwen3-micro "$HERE/qwen3" 151936 151643; fi
if [[ ${GRANITE:-1} != 0 ]]; then teacherForced granite-micro "$HERE/granite" 49216 49152; fi
if [[ ${PHI3:-1} != 0 ]]; then teacherForced phi3-micro "$HERE/phi3" 32064 32000 8192; fi
if [[ ${PHI4:-1} != 0 ]]; then teacherForced phi4-micro "$HERE/phi4" 128267 128000 8192; fi
if [[ ${GEMMA3:-1} != 0 ]]; then teacherForced gemma3-micro "$HERE/gemma3" 32002 32000; fi
# ---------------------------------------------------------------- 5. quantized files vs float64 truth
# For qwen3, granite, phi3 and gemma3 (reference_archs.py; the peer's reference.py is llama only):
# our generator's Q4_K_M micro file (seed 0: the tests re-make it byte for byte) on the ids of
# part 3, in DIR (the arch's folder):
#   q4_k_m.truth_cols.bin        float32 [64][ceil(vocab / 37)]: the float64 truth's every 37th column
#   q4_k_m.truth_argmax.txt      its argmax per position (whole vocabulary)
#   q4_k_m.llamacpp_vs_truth.txt "nmse N top1 T": llama.cpp's logits on the file against the truth
# QUANT_TRUTH=0 skips it.
quantTruth() {
  local shape=$1 dir=$2 nv=$3 ctx=${4:-} model
  model=$(mktemp -d)/model-q4_k_m.gguf
  "$JITLLM_MKMODEL" "$shape" q4_k_m "$model" --seed 0 --shared "$SHARED" >&2
  $PY "$HERE/reference_archs.py" "$model" -t "$(cat "$dir/tokens.txt")" ${ctx:+--ctx $ctx} --out "$dir/q4_k_m.truth"
  mv "$dir/q4_k_m.truth.cols.bin" "$dir/q4_k_m.truth_cols.bin"
  mv "$dir/q4_k_m.truth.argmax.txt" "$dir/q4_k_m.truth_argmax.txt"
  "$BIN/llama-greedy" "$model" --score -t "$(cat "$dir/tokens.txt")" --logits "$model.logits" --threads 2 \
    ${ctx:+--ctx $ctx} >/dev/null 2>&1
  $PY - "$model.logits" "$dir" "$nv" <<'PYEOF'
import sys, numpy as np
l = np.fromfile(sys.argv[1], np.float32).reshape(64, int(sys.argv[3]))
truth = np.fromfile(sys.argv[2] + "/q4_k_m.truth_cols.bin", np.float32).reshape(64, -1).astype(np.float64)
cols = l[:, ::37].astype(np.float64)
nmse = ((cols - truth) ** 2).sum() / (truth ** 2).sum()
argmax = [int(v) for v in open(sys.argv[2] + "/q4_k_m.truth_argmax.txt").read().split()]
top1 = float(np.mean(l.argmax(1) == np.array(argmax)))
open(sys.argv[2] + "/q4_k_m.llamacpp_vs_truth.txt", "w").write("nmse %.6e top1 %.6f\n" % (nmse, top1))
print(sys.argv[2], "llama.cpp q4_k_m vs truth: nmse %.3e top1 %.4f" % (nmse, top1))
PYEOF
  rm -rf "$(dirname "$model")"
}
if [[ ${QUANT_TRUTH:-1} != 0 ]]; then
  [[ -x $JITLLM_MKMODEL ]] || { echo "missing $JITLLM_MKMODEL: build jitllm first" >&2; exit 1; }
  quantTruth qwen3-micro "$HERE/qwen3" 151936
  quantTruth granite-micro "$HERE/granite" 49216
  quantTruth phi3-micro "$HERE/phi3" 32064 8192
  quantTruth phi4-micro "$HERE/phi4" 128267 8192
  quantTruth gemma3-micro "$HERE/gemma3" 32002
fi

# ---------------------------------------------------------------- 4. Tokenizer forms of our own
# Gemma 3's and Phi-4's real vocabularies are not in llama.cpp's models/, so the vectors are for
# the vocabularies our generator writes for those shapes (a vocab file's pieces in the family's
# form, tools/random_model.h), tokenized by llama.cpp: vocab/ggml-vocab-NAME-form.gguf
# (jitllm-mkmodel --vocab-only) with the source vocabulary's inputs, and llama.cpp's ids for each
# (from llama-greedy's prompt_tokens, the BOS it adds removed).
# - gemma3-form: llama-spm's pieces, SentencePiece without the space prefix (Gemma's files).
# - phi4-form: llama-bpe's pieces under the gpt-4o pre-tokenizer (Phi-4-mini's), no BOS added.
# FORM_VOCAB=0 skips it.
formVocab() {  # SHAPE NAME SOURCE-VOCAB BOS-ID-OR-none
  local shape=$1 name=$2 source=$3 bos=$4
  local vocab=$HERE/vocab/ggml-vocab-$name.gguf scratch
  scratch=$(mktemp -d)
  "$JITLLM_MKMODEL" "$shape" f16 "$vocab" --vocab-only --seed 0 --shared "$SHARED" >&2
  "$JITLLM_MKMODEL" "$shape" f16 "$scratch/model.gguf" --seed 0 --shared "$SHARED" >&2
  rm -f "$vocab.inp" && cp "$SHARED/vocab/ggml-vocab-$source.gguf.inp" "$vocab.inp" && chmod 644 "$vocab.inp"
  $PY - "$BIN/llama-greedy" "$scratch/model.gguf" "$vocab.inp" "$vocab.out" "$bos" <<'PYEOF'
import subprocess, sys
greedy, model, inp, out, bos = sys.argv[1:6]
inputs = open(inp, encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
if inputs and inputs[-1] == "":
    inputs.pop()
lines = []
for text in inputs:
    if text == "" and bos == "none":  # no ids at all: nothing for llama-greedy to decode from
        lines.append("")
        continue
    r = subprocess.run([greedy, model, "-p", text, "-n", "1"], capture_output=True, check=True)
    stdout = r.stdout.decode("utf-8", "replace")  # the generated text may be any bytes
    ids = next(l for l in stdout.splitlines() if l.startswith("prompt_tokens:")).split()[1:]
    if bos != "none":
        assert ids[0] == bos, ids  # the BOS llama.cpp adds
        ids = ids[1:]
    lines.append("".join(" " + i for i in ids))
open(out, "w").write("\n".join(lines) + "\n")
PYEOF
  rm -rf "$scratch"
}
if [[ ${FORM_VOCAB:-1} != 0 ]]; then
  [[ -x $JITLLM_MKMODEL ]] || { echo "missing $JITLLM_MKMODEL: build jitllm first" >&2; exit 1; }
  formVocab gemma3-micro gemma3-form llama-spm 1
  formVocab phi4-micro phi4-form llama-bpe none
fi
echo "done"
