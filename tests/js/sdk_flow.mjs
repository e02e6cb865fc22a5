// LangGraph's JavaScript SDK (@langchain/langgraph-sdk) against a running `stageline serve`:
// the core flow, the calls Agent Inbox makes, the store, and an error the SDK surfaces.
//
//   node tests/js/sdk_flow.mjs [URL] [TOKEN]    (or STAGELINE_URL, STAGELINE_TOKEN)
//
// The token needs the `decide` scope. Prints one JSON line per step ({"step", "ok", ...}) and
// exits 1 at the first mismatch (its line says what was expected and what came), 2 when the
// arguments are missing, 3 when a step hangs. tests/acceptance/test_langgraph_js_sdk.py runs it.
import { randomUUID } from "node:crypto";

import { Client } from "@langchain/langgraph-sdk";

const url = process.argv[2] ?? process.env.STAGELINE_URL;
const token = process.argv[3] ?? process.env.STAGELINE_TOKEN;
if (!url || !token) {
  console.error("usage: node sdk_flow.mjs URL TOKEN (or STAGELINE_URL and STAGELINE_TOKEN)");
  process.exit(2);
}
const STEP_TIMEOUT_MS = Number(process.env.STAGELINE_JS_STEP_TIMEOUT_MS ?? 60_000);

// No retries: a failing call is shown as it failed, not after four backoffs.
const client = new Client({ apiUrl: url, apiKey: token, callerOptions: { maxRetries: 0 } });

class Mismatch extends Error {}

function check(condition, expected, got) {
  if (!condition) throw Object.assign(new Mismatch(expected), { got });
}

function equal(got, expected, what) {
  check(
    JSON.stringify(got) === JSON.stringify(expected),
    `${what}: ${JSON.stringify(expected)}`,
    got,
  );
}

function print(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

// A step: run `body`, print what it shows (its return value) or why it failed, and stop there.
async function step(name, body) {
  let timer;
  const hang = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
  });
  try {
    const shown = await Promise.race([body(), hang]);
    print({ step: name, ok: true, ...shown });
    return shown;
  } catch (error) {
    const line = { step: name, ok: false, error: String(error?.message ?? error) };
    if (error instanceof Mismatch) line.got = error.got;
    if (error?.status !== undefined) line.status = error.status;
    print(line);
    process.exit(error?.message?.startsWith("no answer in") ? 3 : 1);
  } finally {
    clearTimeout(timer);
  }
}

// An SDK call that must fail with `status`: the HTTPError the SDK throws, with the body's detail.
async function refused(status, call) {
  try {
    const answer = await call();
    throw Object.assign(new Mismatch(`HTTP ${status}`), { got: answer });
  } catch (error) {
    if (error instanceof Mismatch) throw error;
    check(error?.status === status, `HTTP ${status}`, String(error?.message ?? error));
    return { status: error.status, detail: JSON.parse(error.text).detail };
  }
}

const interruptsOf = (thread) => Object.values(thread.interrupts ?? {}).flat();
const run = randomUUID().slice(0, 8); // this run's own metadata and store namespace

await step("assistants.search", async () => {
  const found = await client.assistants.search({ limit: 100 });
  const ids = found.map((a) => a.assistant_id);
  check(ids.includes("blog_post"), "blog_post among the assistants", ids);
  check(found.every((a) => a.graph_id === a.assistant_id), "graph_id = assistant_id", found);
  return { assistants: ids };
});

await step("assistants.get", async () => {
  const one = await client.assistants.get("blog_post");
  equal([one.assistant_id, one.graph_id, one.name], ["blog_post", "blog_post", "blog_post"], "ids");
  return { name: one.name };
});

await step("assistants.getGraph", async () => {
  const graph = await client.assistants.getGraph("blog_post");
  const nodes = graph.nodes.map((n) => n.id);
  for (const node of ["research", "draft", "editor_approval", "publish"]) {
    check(nodes.includes(node), `node ${node}`, nodes);
  }
  const edges = graph.edges.map((e) => `${e.source}->${e.target}`);
  check(edges.includes("aggregate->editor_approval"), "edge aggregate->editor_approval", edges);
  return { nodes };
});

const thread = await step("threads.create", async () => {
  const made = await client.threads.create({ metadata: { via: "js", run } });
  equal(made.status, "idle", "status");
  equal(made.metadata, { via: "js", run }, "metadata");
  return { thread_id: made.thread_id };
});
const tid = thread.thread_id;

const stopped = await step("runs.wait", async () => {
  const out = await client.runs.wait(tid, "blog_post", { input: { topic: "owls" } });
  equal(out.topic, "owls", "topic");
  check(typeof out.draft === "string" && out.draft, "a draft", out.draft);
  const [interrupt, ...more] = out.__interrupt__ ?? [];
  equal(more, [], "one interrupt");
  equal(interrupt?.value?.gate, "editor_approval", "the gate");
  return { interrupt_id: interrupt.id, gate: interrupt.value.gate };
});

await step("threads.getState", async () => {
  const state = await client.threads.getState(tid);
  equal(state.next, ["editor_approval"], "next");
  equal(state.interrupts.map((i) => i.id), [stopped.interrupt_id], "interrupts");
  equal(state.tasks.map((t) => t.name), ["editor_approval"], "tasks");
  equal(state.tasks[0].interrupts[0].value.gate, "editor_approval", "the task's interrupt");
  equal(state.values.topic, "owls", "values.topic");
  return { next: state.next };
});

// Agent Inbox's list: interrupted threads of one graph (metadata graph_id), a page at a time,
// each shown from `thread.interrupts`; then one thread by id, as it opens it.
await step("threads.search(interrupted)", async () => {
  const page = await client.threads.search({
    status: "interrupted",
    metadata: { graph_id: "blog_post", run },
    limit: 10,
    offset: 0,
  });
  equal(page.map((t) => t.thread_id), [tid], "the interrupted thread");
  const [listed] = page;
  equal(listed.status, "interrupted", "status");
  equal(interruptsOf(listed).map((i) => i.value?.gate), ["editor_approval"], "thread.interrupts");
  const idle = await client.threads.search({ status: "idle", metadata: { run } });
  equal(idle, [], "no idle thread of this run yet");
  return { threads: page.length };
});

await step("threads.get(interrupted)", async () => {
  const got = await client.threads.get(tid);
  equal(got.status, "interrupted", "status");
  equal(got.metadata.graph_id, "blog_post", "metadata.graph_id");
  equal(interruptsOf(got).map((i) => i.id), [stopped.interrupt_id], "thread.interrupts");
  return { status: got.status };
});

const resumed = await step("runs.create(resume)", async () => {
  const created = await client.runs.create(tid, "blog_post", { command: { resume: "approve" } });
  equal(created.thread_id, tid, "thread_id");
  check(["pending", "running"].includes(created.status), "pending or running", created.status);
  return { run_id: created.run_id, status: created.status };
});

await step("runs.join", async () => {
  const done = await client.runs.join(tid, resumed.run_id);
  check(typeof done.post_path === "string" && done.post_path, "post_path", done);
  check(!("__interrupt__" in done), "no interrupt left", done.__interrupt__);
  equal((await client.runs.get(tid, resumed.run_id)).status, "success", "the run's status");
  return { post_path: done.post_path };
});

await step("threads.get(idle)", async () => {
  const got = await client.threads.get(tid);
  equal(got.status, "idle", "status");
  equal(interruptsOf(got), [], "interrupts");
  const runs = await client.runs.list(tid);
  equal(runs.map((r) => r.run_id)[0], resumed.run_id, "the newest run");
  equal(runs.length, 2, "two runs: the start, the resume");
  return { status: got.status };
});

const streamed = await step("runs.stream", async () => {
  const other = (await client.threads.create({ metadata: { via: "js", run, n: 2 } })).thread_id;
  const parts = [];
  for await (const part of client.runs.stream(other, "blog_post", {
    input: { topic: "bees" },
    streamMode: ["values", "updates"],
  })) {
    parts.push(part);
  }
  const events = parts.map((p) => p.event);
  equal(events[0], "metadata", "first event");
  check(typeof parts[0].data.run_id === "string", "metadata.run_id", parts[0].data);
  const updates = parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)[0]);
  equal(updates.slice(0, 3), ["research", "outline", "draft"], "first updates");
  equal(updates.at(-1), "__interrupt__", "last update");
  // As LangGraph streams them: the state after each step, then the interrupt on its own.
  const values = parts.filter((p) => p.event === "values").map((p) => p.data);
  const states = values.filter((v) => !("__interrupt__" in v));
  check(states.length > 0, "values events", events);
  equal(states.at(-1).topic, "bees", "the last state's topic");
  check(typeof states.at(-1).draft === "string", "the last state's draft", states.at(-1));
  equal(values.at(-1).__interrupt__?.[0]?.value?.gate, "editor_approval", "the last values");
  equal((await client.threads.get(other)).status, "interrupted", "the thread's status");
  return { thread_id: other, events: [...new Set(events)], updates };
});

await step("store", async () => {
  const ns = ["js", run, "notes"];
  check((await client.store.putItem(ns, "first", { n: 1, tag: "a" })) === undefined, "204", "");
  await client.store.putItem(ns, "second", { n: 2, tag: "b" });
  const item = await client.store.getItem(ns, "first");
  equal([item?.namespace, item?.key, item?.value], [ns, "first", { n: 1, tag: "a" }], "the item");
  check(item.createdAt && item.updatedAt, "createdAt and updatedAt", item);
  const { items } = await client.store.searchItems(["js", run], { filter: { tag: "b" } });
  equal(items.map((i) => [i.key, i.value.n]), [["second", 2]], "search by filter");
  const all = await client.store.searchItems(["js", run], { limit: 10 });
  equal(all.items.map((i) => i.key).sort(), ["first", "second"], "search by prefix");
  const { namespaces } = await client.store.listNamespaces({ prefix: ["js", run] });
  equal(namespaces, [ns], "namespaces");
  const shallow = await client.store.listNamespaces({ prefix: ["js", run], maxDepth: 2 });
  equal(shallow.namespaces, [["js", run]], "namespaces to depth 2");
  await client.store.deleteItem(ns, "first");
  equal(await client.store.getItem(ns, "first"), null, "a deleted item");
  equal((await client.store.getItem(ns, "second"))?.value, { n: 2, tag: "b" }, "the other item");
  return { namespace: ns };
});

await step("errors", async () => {
  const missing = await refused(404, () => client.threads.get(randomUUID()));
  await refused(404, () => client.threads.getState(randomUUID()));
  await refused(404, () => client.assistants.get("no_such_template"));
  // stageline's rule: a waiting gate passes only by a decision, never by new input.
  const conflict = await refused(409, () =>
    client.runs.wait(streamed.thread_id, "blog_post", { input: { topic: "wasps" } }),
  );
  const malformed = await refused(422, () =>
    client.runs.wait(null, "blog_post", { input: { topik: "x" } }),
  );
  return { not_found: missing.detail, conflict: conflict.detail, malformed: malformed.detail };
});

print({ step: "done", ok: true });
