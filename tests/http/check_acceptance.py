"""The checks of openai_acceptance.sh that need parsing: the openai client's texts against
jitllmctl's, and /metrics (with prometheus_client's own text parser) against the requests made.
  check_acceptance.py WORK_DIR MODEL
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

work, model = sys.argv[1], sys.argv[2]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def find(doc, key):
    """The first value of `key` anywhere in a JSON document."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for v in doc:
            found = find(v, key)
            if found is not None:
                return found
    return None


node = json.load(open(f"{work}/node.json"))


def last_json(path):
    text = open(path).read().strip()
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")][-1]


ctl_run, ctl_chat = last_json(f"{work}/ctl-run.json"), last_json(f"{work}/ctl-chat.json")
check(node["completion"] == find(ctl_run, "text"), f"completion text equals jitllmctl run's: {node['completion']!r}")
check(node["chat"] == find(ctl_chat, "text"), f"chat text equals jitllmctl chat's: {node['chat']!r}")
for name, usage, ctl in (("completion", node["completionUsage"], ctl_run), ("chat", node["chatUsage"], ctl_chat)):
    check(usage["completion_tokens"] == find(ctl, "generatedTokens"),
          f"{name} completion_tokens {usage['completion_tokens']} = jitllmctl's generatedTokens {find(ctl, 'generatedTokens')}")
    check(usage["prompt_tokens"] == find(ctl, "promptTokens"),
          f"{name} prompt_tokens {usage['prompt_tokens']} = jitllmctl's promptTokens {find(ctl, 'promptTokens')}")


def samples(path):
    out = {}
    for family in text_string_to_metric_families(open(path).read()):
        for s in family.samples:
            if s.labels.get("model", model) == model:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


before, after = samples(f"{work}/metrics-before.txt"), samples(f"{work}/metrics-after.txt")


def delta(name):
    key = (name, (("model", model),))
    return after.get(key, 0) - before.get(key, 0)


# Per transport: a chat and a completion, each complete and streamed; the refused requests start none.
generations = 2 * 4
prompt = 2 * 2 * (node["chatUsage"]["prompt_tokens"] + node["completionUsage"]["prompt_tokens"])
generated = 2 * 2 * (node["chatUsage"]["completion_tokens"] + node["completionUsage"]["completion_tokens"])
check(delta("jitllm:requests_total") == generations, f"requests_total moved by {delta('jitllm:requests_total')}, expected {generations}")
check(delta("jitllm:prompt_tokens_total") == prompt, f"prompt_tokens_total moved by {delta('jitllm:prompt_tokens_total')}, expected {prompt}")
check(delta("jitllm:generation_tokens_total") == generated,
      f"generation_tokens_total moved by {delta('jitllm:generation_tokens_total')}, expected {generated}")
check(delta("jitllm:time_to_first_token_seconds_count") == generations, "one TTFT observation per generation")
check(delta("jitllm:e2e_request_latency_seconds_count") == generations, "one end-to-end observation per generation")
check(after.get(("jitllm:requests_running", (("model", model),))) == 0, "no request running at the end")
kv_used = [v for (n, labels), v in after.items() if n == "jitllm:kv_pages_used"]
check(len(kv_used) > 0, f"KV pages reported per device: {kv_used}")
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
