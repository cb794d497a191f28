// The mongomem inspector: one page over the JSON API (no build step, no other origin).
// The API key lives in this tab's sessionStorage and travels only in the
// Authorization header; every text shown is set as text, never parsed as HTML.
"use strict";

const KEY = "mongomem.inspector.key";
const view = document.getElementById("view");

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (value !== null && value !== undefined) el.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function table(headers, rows) {
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))));
}

const enc = encodeURIComponent;
const num = (x) => (x === null || x === undefined ? "–" : Number(x).toFixed(3));
const when = (t) => (t ? new Date(t).toLocaleString() : "–");
// why a hit is where it is (SPEC M1): its place by words (BM25), by meaning (cosine) and
// fused, within its memory type ("–": that retriever did not return it)
const place = (r) => (r === null || r === undefined ? "–" : String(r));
const ranks = (r) => (r ? h("span", { class: "ranks", title: "ranks: words (BM25) · meaning (cosine) · fused" },
  `words ${place(r.lexical_rank)} · meaning ${place(r.dense_rank)} · fused ${place(r.fused_rank)}`
  + (r.time_rank ? ` · time ${r.time_rank}` : "")) : "–");

class ApiError extends Error {}

async function api(method, path, body) {
  const key = sessionStorage.getItem(KEY);
  const response = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) { logout("That key was not accepted."); throw new ApiError("401"); }
  if (!response.ok) throw new ApiError((data.error && data.error.message) || `HTTP ${response.status}`);
  return data.result;
}

function logout(message) {
  sessionStorage.removeItem(KEY);
  document.getElementById("nav").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  view.replaceChildren();
}

// ------------------------------------------------------------------ views

async function usersView() {
  const users = await api("GET", "/v1/inspector/users");
  return [h("h2", {}, "Users"),
    table(["user", "sessions", "turns", "memories", "last activity"], users.map((u) => [
      h("a", { href: `#/user/${enc(u.user_id)}` }, u.user_id), u.sessions, u.turns, u.memories,
      when(u.last_activity)]))];
}

async function userView(user) {
  const base = `/v1/users/${enc(user)}`;
  const [sessions, page] = await Promise.all([
    api("GET", `${base}/browse/sessions?limit=100`),
    api("GET", `${base}/browse/memories?limit=500`),
  ]);
  const byType = {};
  for (const m of page.items) (byType[m.memory_type] = byType[m.memory_type] || []).push(m);
  const types = Object.keys(byType).sort();
  const results = h("div", { id: "search-results" });
  const query = h("input", { id: "search-query", placeholder: "search memories", required: "" });
  // every memory type by default; a type is a filter
  const type = h("select", { id: "search-type" }, h("option", { value: "" }, "all types"),
    MEMORY_TYPES.map((t) => h("option", { value: t }, t)));
  const search = h("form", { class: "inline", id: "search", onsubmit: async (event) => {
    event.preventDefault();
    try {
      const wanted = type.value ? [type.value] : MEMORY_TYPES;
      const settled = await Promise.allSettled(wanted.map((t) =>
        api("POST", `${base}/memories/${enc(t)}/search`, { query: query.value, limit: 10 })));
      const failed = settled.find((r) => r.status === "rejected");
      if (failed && settled.every((r) => r.status === "rejected")) throw failed.reason;
      const hits = settled.filter((r) => r.status === "fulfilled").flatMap((r) => r.value)
        .sort((a, b) => b.score - a.score).slice(0, 10);
      results.replaceChildren(hits.length ? table(["score", "ranks", "type", "key", "text"], hits.map((hit) => [
        num(hit.score), ranks(hit.ranks), hit.memory.memory_type,
        memoryLink(user, hit.memory.memory_id, hit.memory.key), hit.memory.text]))
        : h("p", { class: "muted" }, "no match"));
    } catch (err) { results.replaceChildren(h("p", { class: "error" }, err.message)); }
  } }, query, type, h("button", { type: "submit" }, "Search"));
  return [h("h2", {}, `User ${user}`),
    h("h3", {}, "Sessions"),
    table(["session", "turns", "last activity"], sessions.items.map((s) => [
      h("a", { href: `#/session/${enc(user)}/${enc(s.session_id)}` }, s.session_id), s.turn_count,
      when(s.last_activity)])),
    h("h3", {}, "Memories"), search, results,
    types.map((t) => [h("h3", {}, h("span", { class: "tag" }, t), ` ${byType[t].length}`),
      table(["key", "text", "version", "reinforced", "updated"], byType[t].map((m) => [
        memoryLink(user, m.memory_id, m.key), m.text, m.version, m.reinforcement_count,
        when(m.updated_at)]))])];
}

const MEMORY_TYPES = ["semantic", "episodic", "procedural", "taxonomic"];

const memoryLink = (user, id, text) => h("a", { href: `#/memory/${enc(user)}/${enc(id)}` }, text);

async function sessionView(user, session) {
  const page = await api("GET", `/v1/users/${enc(user)}/browse/sessions/${enc(session)}/turns?limit=500`);
  return [h("h2", {}, `Session ${session} of ${user}`),
    table(["seq", "role", "content", "at"], page.items.map((t) => [t.seq, t.role, t.content, when(t.created_at)]))];
}

async function memoryView(user, id) {
  const [versions, log] = await Promise.all([
    api("GET", `/v1/users/${enc(user)}/memory/${enc(id)}/history`),
    api("GET", `/v1/inspector/memories/${enc(id)}/decisions`),
  ]);
  const refs = [...new Set(versions.flatMap((v) => v.evidence.filter((e) => e.source === "snapshot").map((e) => e.ref)))];
  const snapshots = Object.fromEntries(await Promise.all(refs.map(async (ref) => {
    try { return [ref, await api("GET", `/v1/inspector/snapshots/${enc(ref)}`)]; } catch { return [ref, null]; }
  })));
  const t = log.thresholds;
  return [h("h2", {}, `Memory ${versions.length ? versions[0].key : id}`),
    h("p", { class: "muted" }, id),
    h("h3", {}, "Versions"),
    h("div", { class: "versions" }, versions.map((v) => h("div", { class: `card version ${v.status}` },
      h("div", {}, h("b", {}, `v${v.version} `), h("span", { class: "tag" }, v.action), " ", v.status),
      h("p", {}, v.text),
      h("div", { class: "muted" }, `reinforced ${v.reinforcement_count}× · ${when(v.created_at)}`),
      v.reason ? h("div", {}, `reason: ${v.reason}`) : null,
      h("h3", {}, "Evidence"),
      v.evidence.map((e) => h("div", { class: "evidence" },
        h("div", { class: "muted" }, `${e.source} ${e.session_id || ""} · ${when(e.at)}`),
        e.text ? h("div", {}, e.text) : null,
        e.source === "snapshot" && snapshots[e.ref]
          ? h("div", { class: "snapshot" }, snapshots[e.ref].turns.map((turn) => h("div", { class: "turn" },
            h("b", {}, `${turn.seq} ${turn.role}: `), turn.content)))
          : null))))),
    h("h3", {}, "Decision log"),
    h("p", { class: "muted", id: "thresholds" },
      `thresholds: ambiguous at ≥ ${t.ambiguous_at}, floor ${t.floor}, ${t.neighbours} neighbours`),
    table(["at", "action", "version", "key match", "similarity", "scores", "judged", "reason", "differences"],
      log.decisions.map((d) => [when(d.at), d.action, d.base_version ? `${d.base_version} → ${d.version}` : d.version,
        d.key_match ? "yes" : "no", num(d.similarity),
        d.scores.map((s) => h("div", {}, `${s.memory_id.slice(0, 12)} v${s.version}: ${num(s.similarity)}${s.key_match ? " (key)" : ""}`)),
        d.judged ? "judge" : (d.needs_judge ? "needs judge" : "rules"), d.reason, d.differences.join("; ")]))];
}

async function pipelineView() {
  const s = await api("GET", "/v1/inspector/pipeline");
  return [h("h2", {}, "Pipeline"),
    s.problems.map((p) => h("p", { class: "error" }, p)),
    h("h3", {}, "Consumer lag per group"),
    table(["group", "topic", "lag", "committed", "end"], s.groups.map((g) => [g.group, g.topic, g.lag, g.committed, g.end])),
    h("h3", {}, "Dead letters (records ever written, all projects)"),
    table(["stage", "count"], Object.entries(s.dead_letter_counts)),
    h("h3", {}, `This project's recent dead letters (${s.hidden_dead_letters} of other projects hidden)`),
    table(["failed at", "stage", "source", "error", "attempts", "retriable"], s.dead_letters.map((d) => [
      when(d.failed_at), d.stage, `${d.source_topic}[${d.source_partition}]@${d.source_offset}`,
      `${d.error_class}: ${d.error}`, d.attempts, d.retriable ? "yes" : "no"])),
    h("h3", {}, "Stage restarts"),
    s.restarts.length ? table(["stage", "restarts", "last error", "last at"], s.restarts.map((r) => [
      r.stage, r.restarts, r.last_error, when(r.last_at)])) : h("p", { class: "muted" }, "no restart recorded"),
    h("h3", {}, "Local stage processes"),
    s.processes.length ? table(["process", "state"], s.processes.map((p) => [p.name, p.state]))
      : h("p", { class: "muted" }, "none started here (mongomem up)")];
}

async function playgroundView() {
  const spaces = await api("GET", "/v1/spaces");
  const space = h("select", { id: "space" }, spaces.map((s) => h("option", { value: s.space_id }, `${s.name} (${s.kind})`)));
  const inputs = h("textarea", { id: "inputs" }, "{}");
  const out = h("div", { id: "playground-results" });
  const hitsTable = (hits) => table(["score", "meaning", "keyword", "inputs", "outcome"], hits.map((hit) => [
    num(hit.score), num(hit.meaning), num(hit.keyword), JSON.stringify(hit.item.inputs), hit.item.outcome || hit.item.resolution || ""]));
  async function run(path) {
    try {
      const body = { inputs: JSON.parse(inputs.value) };
      const r = await api("POST", `/v1/spaces/${enc(space.value)}/${path}`, body);
      if (path === "playground") {
        // no null child: replaceChildren would show it as the text "null"
        out.replaceChildren(...[h("h3", {}, `Matches (${r.matches.length})`), hitsTable(r.matches),
          h("h3", {}, `Near misses (${r.near_misses.length})`), hitsTable(r.near_misses),
          r.escalation ? escalation(r.escalation) : null].filter((x) => x !== null));
      } else out.replaceChildren(escalation(r));
    } catch (err) { out.replaceChildren(h("p", { class: "error" }, err.message)); }
  }
  const escalation = (e) => h("div", { class: "card escalation" },
    h("b", {}, e.apply ? `apply: ${e.outcome}` : "escalate (no resolution applies)"),
    h("div", { class: "muted" }, `threshold ${num(e.threshold)}; top score ${e.top ? num(e.top.score) : "–"}`));
  return [h("h2", {}, "Memory-space playground"),
    spaces.length ? null : h("p", { class: "muted" }, "this project has no spaces"),
    h("div", { class: "inline" }, space), h("label", {}, "inputs (JSON object)"), inputs,
    h("div", { class: "inline" },
      h("button", { id: "recall", type: "button", onclick: () => run("playground") }, "Recall"),
      h("button", { id: "check-escalation", type: "button", onclick: () => run("escalations/check") }, "Check escalation")),
    out];
}

// ------------------------------------------------------------------ routing

const routes = [
  [/^#\/users$/, usersView],
  [/^#\/user\/([^/]+)$/, userView],
  [/^#\/session\/([^/]+)\/([^/]+)$/, sessionView],
  [/^#\/memory\/([^/]+)\/([^/]+)$/, memoryView],
  [/^#\/pipeline$/, pipelineView],
  [/^#\/playground$/, playgroundView],
];

async function render() {
  if (!sessionStorage.getItem(KEY)) { logout(); return; }
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  const hash = location.hash || "#/users";
  const route = routes.find(([pattern]) => pattern.test(hash));
  if (!route) { location.hash = "#/users"; return; }
  const args = hash.match(route[0]).slice(1).map(decodeURIComponent);
  view.replaceChildren(h("p", { class: "muted" }, "loading …"));
  view.dataset.ready = "";
  try {
    view.replaceChildren(...[await route[1](...args)].flat(3).filter(Boolean));
  } catch (err) {
    if (err.message === "401") return;
    view.replaceChildren(h("p", { class: "error" }, err.message));
  }
  view.dataset.ready = hash;
}

document.getElementById("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const field = document.getElementById("key");
  sessionStorage.setItem(KEY, field.value.trim());
  field.value = "";
  document.getElementById("login-error").textContent = "";
  await render();
});
document.getElementById("logout").addEventListener("click", () => logout());
window.addEventListener("hashchange", render);
render();
