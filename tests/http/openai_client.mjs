// Drives jitllmd's HTTP API with OpenAI's official Node.js client (the `openai` npm package), over
// the HTTP Unix socket and a loopback port, and prints what it got as one JSON document for
// openai_acceptance.sh to compare with jitllmctl. Exits non-zero, saying why, on any mismatch.
//   node openai_client.mjs SOCKET PORT MODEL
import http from 'node:http';
import net from 'node:net';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [socketPath, port, model] = process.argv.slice(2);

// The client's own option for a custom transport: an http.Agent whose connections go to the socket.
class UnixSocketAgent extends http.Agent {
  constructor(path) {
    super({ keepAlive: true });
    this.path = path;
  }
  createConnection(options, callback) {
    return net.createConnection(this.path, callback);
  }
}

const transports = {
  unix: new OpenAI({ apiKey: 'unused', baseURL: 'http://localhost/v1', httpAgent: new UnixSocketAgent(socketPath), maxRetries: 0 }),
  tcp: new OpenAI({ apiKey: 'unused', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 }),
};

const chatRequest = { model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 48, temperature: 0 };
const completionRequest = { model, prompt: 'Once upon a time', max_tokens: 48, temperature: 0 };

async function streamed(iterable, textOf) {
  let text = '';
  let usage = null;
  let finish = null;
  let chunks = 0;
  for await (const chunk of iterable) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += textOf(choice) ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return { text, usage, finish, chunks };
}

const out = {};
for (const [name, client] of Object.entries(transports)) {
  const chat = await client.chat.completions.create({ ...chatRequest, logprobs: true, top_logprobs: 2 });
  const chatText = chat.choices[0].message.content;
  assert.ok(chatText.length > 0, `${name}: the chat reply is empty`);
  assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason), `${name}: finish_reason ${chat.choices[0].finish_reason}`);
  const lp = chat.choices[0].logprobs.content;
  assert.equal(lp.length, chat.usage.completion_tokens, `${name}: one logprob per completion token`);
  for (const t of lp) {
    assert.ok(t.logprob <= 0 && t.top_logprobs.length === 2, `${name}: logprob ${JSON.stringify(t)}`);
    // Greedy: the token picked is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5, `${name}: greedy token is not the top one`);
  }
  assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);

  const chatStream = await streamed(
    await client.chat.completions.create({ ...chatRequest, stream: true, stream_options: { include_usage: true } }),
    (c) => c.delta?.content);
  assert.equal(chatStream.text, chatText, `${name}: streamed chat text differs from the complete one`);
  assert.deepEqual(chatStream.usage, chat.usage, `${name}: streamed usage differs`);
  assert.equal(chatStream.finish, chat.choices[0].finish_reason);
  assert.ok(chatStream.chunks > 3, `${name}: the chat came in ${chatStream.chunks} chunks: not streamed`);

  const completion = await client.completions.create(completionRequest);
  const completionStream = await streamed(
    await client.completions.create({ ...completionRequest, stream: true, stream_options: { include_usage: true } }),
    (c) => c.text);
  assert.equal(completionStream.text, completion.choices[0].text, `${name}: streamed completion differs`);
  assert.deepEqual(completionStream.usage, completion.usage, `${name}: streamed completion usage differs`);

  const models = await client.models.list();
  const listed = models.data.find((m) => m.id === model);
  assert.ok(listed && listed.resident === true, `${name}: /v1/models does not show ${model} resident`);
  assert.equal((await client.models.retrieve(model)).id, model);

  // Errors come as OpenAI's error objects, which the client turns into its typed errors.
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404 && e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.chat.completions.create({ ...chatRequest, temperature: 7 }),
    (e) => e.status === 400 && e.param === 'temperature' && e instanceof OpenAI.BadRequestError);
  await assert.rejects(client.chat.completions.create({ ...chatRequest, model: 'no-such-model' }),
    (e) => e.status === 404 && e.code === 'model_not_found');

  out[name] = { chat: chatText, chatUsage: chat.usage, completion: completion.choices[0].text, completionUsage: completion.usage };
}
assert.deepEqual(out.unix, out.tcp, 'the Unix socket and the loopback port answered differently');
console.log(JSON.stringify(out.unix));
