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
// The two clocks (SPEC L1): when it was said, as the date of the world (UTC), and when it
// holds or happened, with the conversation's own words ("yesterday").
const day = (t) => (t ? new Date(t).toISOString().slice(0, 10) : "–");
function eventText(e) {
  if (!e) return "–";
  const lo = e.valid_from, hi = e.valid_to;
  let text = lo && hi ? (lo === hi ? lo : `${lo}..${hi}`) : lo ? `from ${lo}` : hi ? `until ${hi}` : "";
  if (e.phrase) text = text ? `${text} ("${e.phrase}")` : `"${e.phrase}"`;
  return text || "–";
}
const about = (m) => m.subject || "user";
// why a hit is where it is (SPEC M1): its place by words (BM25), by meaning (cosine) and
// fused, within its memory type ("–": that retriever did not return it)
const place = (r) => (r === null || r === undefined ? "–" : String(r));
const ranks = (r) => (r ? h("span", { class: "ranks", title: "ranks: words (BM25) · meaning (cosine) · fused" },
  `words ${place(r.lexical_rank)} · meaning ${place(r.dense_rank)} · fused ${place(r.fused_rank)}`
  + (r.time_rank ? ` · time ${r.time_rank}` : "")
  + (r.speaker_rank ? ` · speaker ${r.speaker_rank}` : "")) : "–");

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

// ------------------------------------------------------------------ paging

// Rows a list shows at once; every list of the page is paged by the server.
const PAGE = 25;

// A paged list: `fetchPage(token)` → {items, next, head}, the token null for the first
// page and `next` null on the last; `show(items)` renders a page. Previous and next
// buttons walk the tokens seen; the box's data-page says which page is shown.
async function paged(id, show, fetchPage, empty) {
  const box = h("div", { class: "paged", id });
  const tokens = [null];
  async function load() {
    box.dataset.page = "";
    try {
      const page = await fetchPage(tokens[tokens.length - 1]);
      const more = page.next !== null && page.next !== undefined;
      const pager = tokens.length > 1 || more ? h("div", { class: "pager" },
        h("button", { type: "button", class: "prev", disabled: tokens.length > 1 ? null : "",
          onclick: () => { tokens.pop(); load(); } }, "← previous"),
        h("span", { class: "muted" }, `page ${tokens.length}`),
        h("button", { type: "button", class: "next", disabled: more ? null : "",
          onclick: () => { tokens.push(page.next); load(); } }, "next →")) : null;
      box.replaceChildren(...[page.head || null,
        page.items.length ? await show(page.items) : h("p", { class: "muted" }, empty || "none"),
        pager].flat().filter((x) => x !== null));
    } catch (err) {
      if (err.message === "401") return;
      box.replaceChildren(h("p", { class: "error" }, err.message));
    }
    box.dataset.page = String(tokens.length);
  }
  await load();
  return box;
}

// A route that pages by cursor (`limit`, `cursor` → {items, next_cursor}).
const byCursor = (path, query = "") => async (cursor) => {
  const page = await api("GET", `${path}?limit=${PAGE}${query}${cursor ? `&cursor=${enc(cursor)}` : ""}`);
  return { items: page.items, next: page.next_cursor };
};

// A route that pages by offset and answers a list: one row more than a page says
// whether there is a next page.
const byOffset = (path, query = "") => async (offset) => {
  const from = offset || 0;
  const rows = await api("GET", `${path}?limit=${PAGE + 1}&offset=${from}${query}`);
  return { items: rows.slice(0, PAGE), next: rows.length > PAGE ? from + PAGE : null };
};

// ------------------------------------------------------------------ confirmation

// A destructive action behind a confirmation: the button only opens a panel saying what
// will happen; the panel's confirm acts, its cancel closes it and nothing is sent. With
// `typed`, the confirm stays disabled until that text (the user id) is typed. With
// `reason`, the panel asks for one (sent with the action).
function confirmed({ id, label, warning, typed, reason, act }) {
  const out = h("div", { id: `${id}-result` });
  const field = typed ? h("input", { id: `${id}-typed`, autocomplete: "off", placeholder: typed,
    oninput: () => { go.disabled = field.value !== typed; } }) : null;
  const why = reason ? h("input", { id: `${id}-reason`, autocomplete: "off",
    placeholder: "reason (optional, kept with the deletion)" }) : null;
  const go = h("button", { type: "button", id: `${id}-go`, class: "danger", disabled: typed ? "" : null,
    onclick: async () => {
      go.disabled = true;
      try { out.replaceChildren(...[await act(why ? why.value.trim() : "")].flat()); panel.hidden = true; }
      catch (err) { if (err.message !== "401") out.replaceChildren(h("p", { class: "error" }, err.message)); }
      go.disabled = typed ? field.value !== typed : false;
    } }, label);
  const cancel = h("button", { type: "button", id: `${id}-cancel`, onclick: () => {
    panel.hidden = true; open.hidden = false; if (field) field.value = ""; if (why) why.value = "";
    go.disabled = Boolean(typed);
  } }, "Cancel");
  const panel = h("div", { class: "card confirm", id: `${id}-panel`, hidden: "" },
    h("p", {}, warning), typed ? h("label", {}, `Type ${typed} to confirm: `, field) : null,
    why, h("div", { class: "inline" }, go, cancel));
  const open = h("button", { type: "button", id, class: "danger", onclick: () => {
    panel.hidden = false; open.hidden = true; (field || why || go).focus();
  } }, `${label} …`);
  return h("div", { class: "danger-zone" }, open, panel, out);
}

const erasureSummary = (r) => h("p", { class: "done" }, r.message,
  ` (${Object.entries(r.removed).filter(([, n]) => n).map(([c, n]) => `${c}: ${n}`).join(", ") || "nothing removed"})`);

// ------------------------------------------------------------------ views

// How many memories a user has, by the rule of both pages: their own current ones
// plus the project's (taxonomic terms), which every user's page lists.
const memoryCount = (all, shared) => (shared ? `${all} (${shared} shared by the project)` : String(all));

async function usersView() {
  const list = await paged("users", (users) =>
    table(["user", "sessions", "turns", "memories", "last activity"], users.map((u) => [
      h("a", { href: `#/user/${enc(u.user_id)}` }, u.user_id), u.sessions, u.turns,
      memoryCount(u.memories, u.project_memories), when(u.last_activity)])),
  byOffset("/v1/inspector/users"), "no user yet");
  return [h("h2", {}, "Users"), list,
    h("p", { class: "muted" }, "A user's memories are their own current ones plus the project's "
      + "(taxonomic terms, shared by every user of the project), as the user's page lists them.")];
}

async function userView(user) {
  const base = `/v1/users/${enc(user)}`;
  const [all, shared] = await Promise.all([
    api("GET", `${base}/browse/memories/count`),
    api("GET", `${base}/browse/memories/count?memory_type=taxonomic`),
  ]);
  const sessions = await paged("sessions", (items) =>
    table(["session", "turns", "last activity"], items.map((s) => [
      h("a", { href: `#/session/${enc(user)}/${enc(s.session_id)}` }, s.session_id), s.turn_count,
      when(s.last_activity)])),
  byCursor(`${base}/browse/sessions`), "no session");
  const showMemories = (items) => table(
    ["type", "key", "text", "about", "said", "holds / happened", "version", "reinforced", "updated"],
    items.map((m) => [h("span", { class: "tag" }, m.memory_type), memoryLink(user, m.memory_id, m.key),
      m.text, about(m), day(m.observed_at), eventText(m.event), m.version, m.reinforcement_count,
      when(m.updated_at)]));
  const listOf = (t) => paged("memories", showMemories,
    byCursor(`${base}/browse/memories`, t ? `&memory_type=${enc(t)}` : ""), "no memory");
  let memories = await listOf("");
  const filter = h("select", { id: "memory-type", onchange: async () => {
    const next = await listOf(filter.value);
    memories.replaceWith(next);
    memories = next;
  } }, h("option", { value: "" }, "all types"), MEMORY_TYPES.map((t) => h("option", { value: t }, t)));
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
      results.replaceChildren(hits.length ? table(["score", "ranks", "type", "key", "text", "about", "said", "holds / happened"], hits.map((hit) => [
        num(hit.score), ranks(hit.ranks), hit.memory.memory_type, memoryLink(user, hit.memory.memory_id, hit.memory.key),
        hit.memory.text, about(hit.memory), day(hit.memory.observed_at), eventText(hit.memory.event)]))
        : h("p", { class: "muted" }, "no match"));
    } catch (err) { results.replaceChildren(h("p", { class: "error" }, err.message)); }
  } }, query, type, h("button", { type: "submit" }, "Search"));
  const erase = confirmed({
    id: "erase-user", label: "Erase user", typed: user,
    warning: `Erase ${user}: every turn, snapshot and memory of theirs, and what was derived `
      + "from them, in every session. The erasure is recorded in the erasure register and "
      + "cannot be undone. The project's shared memories stay.",
    act: async () => [erasureSummary(await api("DELETE", `${base}?confirm=true`)),
      h("a", { href: "#/users" }, "back to the users")],
  });
  return [h("h2", {}, `User ${user}`),
    h("h3", {}, "Sessions"), sessions,
    h("p", {}, h("a", { href: `#/turns/${enc(user)}`, id: "turn-search-link" },
      "Search the conversation (every session's turns)")),
    h("h3", { id: "memory-count" }, shared
      ? `Memories: ${all}, ${shared} shared by the project (taxonomic terms)` : `Memories: ${all}`),
    search, results, h("div", { class: "inline" }, h("label", {}, "list "), filter), memories,
    h("h3", {}, "Erase"), erase];
}

const MEMORY_TYPES = ["semantic", "episodic", "procedural", "taxonomic"];

const memoryLink = (user, id, text) => h("a", { href: `#/memory/${enc(user)}/${enc(id)}` }, text);

async function sessionView(user, session) {
  const path = `/v1/users/${enc(user)}/sessions/${enc(session)}`;
  const turns = await paged("turns", (items) =>
    table(["seq", "role", "speaker", "content", "at"], items.map((t) => [t.seq, t.role, t.speaker || "–",
      t.content, when(t.created_at)])),
  byCursor(`/v1/users/${enc(user)}/browse/sessions/${enc(session)}/turns`), "no turn");
  const erase = confirmed({
    id: "erase-session", label: "Erase session",
    warning: `Erase session ${session} of ${user}: its turns and snapshots, and what was learned `
      + "only from it (memories learned elsewhere too are kept, with less evidence). The erasure "
      + "is recorded in the erasure register and cannot be undone.",
    act: async () => [erasureSummary(await api("DELETE", `${path}?confirm=true`)),
      h("a", { href: `#/user/${enc(user)}` }, `back to ${user}`)],
  });
  return [h("h2", {}, `Session ${session} of ${user}`), turns, h("h3", {}, "Erase"), erase];
}

// ------------------------------------------------------------------ turn search

// When a turn was said, to the minute, in UTC (the days of the filters are UTC days).
const stamp = (t) => (t ? `${new Date(t).toISOString().slice(0, 16).replace("T", " ")} UTC` : "–");
const speakerOf = (t) => (t.speaker ? `${t.speaker} (${t.role})` : t.role);
// "a, b ,c" → ["a", "b", "c"]; nothing → null (every session)
const commaList = (text) => {
  const items = text.split(",").map((x) => x.trim()).filter((x) => x);
  return items.length ? items : null;
};

// The turn search request of the form's fields: only the filters given are sent (an
// unknown or empty one would be refused); the days are whole UTC days, both inclusive.
function turnQuery({ query, sessions, speaker, since, until, neighbours }) {
  const body = { query, limit: 10 };
  const chosen = commaList(sessions);
  if (chosen) body.sessions = chosen;
  if (speaker.trim()) body.speaker = speaker.trim();
  if (since) body.since = `${since}T00:00:00Z`;
  if (until) body.until = `${until}T23:59:59.999Z`;
  if (Number(neighbours)) body.neighbours = Number(neighbours);
  return body;
}

// A hit's turn, with its neighbours in the session around it when they were asked for.
function turnCell(hit) {
  if (!hit.neighbours.length) return hit.turn.content;
  const line = (t, cls) => h("div", { class: `turn ${cls}` }, h("b", {}, `${t.seq} ${speakerOf(t)}: `), t.content);
  return h("div", { class: "around" },
    hit.neighbours.filter((t) => t.seq < hit.turn.seq).map((t) => line(t, "neighbour")),
    line(hit.turn, "hit"),
    hit.neighbours.filter((t) => t.seq > hit.turn.seq).map((t) => line(t, "neighbour")));
}

// Search a user's whole conversation (SPEC M2): every session's turns, ranked as memory
// search is (BM25 and cosine fused; a time expression boosts the turns said in its window).
async function turnsView(user) {
  const field = (id, attrs) => h("input", { id, autocomplete: "off", ...attrs });
  const query = field("turns-query", { placeholder: "search the conversation", required: "" });
  const sessions = field("turns-sessions", { placeholder: "sessions (comma-separated; all if empty)" });
  const speaker = field("turns-speaker", { placeholder: "speaker (any if empty)" });
  const since = field("turns-since", { type: "date", title: "said on or after this day (UTC)" });
  const until = field("turns-until", { type: "date", title: "said on or before this day (UTC)" });
  const neighbours = h("select", { id: "turns-neighbours", title: "turns before and after each hit" },
    [0, 1, 2, 3, 4, 5].map((n) => h("option", { value: String(n) }, n ? `${n} around` : "no neighbours")));
  const results = h("div", { id: "turns-results" });
  const form = h("form", { class: "inline wrap", id: "turn-search", onsubmit: async (event) => {
    event.preventDefault();
    results.dataset.done = "";
    try {
      const body = turnQuery({ query: query.value, sessions: sessions.value, speaker: speaker.value,
        since: since.value, until: until.value, neighbours: neighbours.value });
      const hits = await api("POST", `/v1/users/${enc(user)}/turns/search`, body);
      results.replaceChildren(hits.length ? table(["score", "ranks", "session", "said", "speaker", "turn"],
        hits.map((hit) => [num(hit.score), ranks(hit.ranks),
          h("a", { href: `#/session/${enc(user)}/${enc(hit.session_id)}` }, hit.session_id),
          stamp(hit.created_at), speakerOf(hit.turn), turnCell(hit)]))
        : h("p", { class: "muted" }, "no turn matches"));
    } catch (err) {
      if (err.message !== "401") results.replaceChildren(h("p", { class: "error" }, err.message));
    }
    results.dataset.done = "yes";
  } }, query, sessions, speaker, h("label", {}, "since ", since), h("label", {}, "until ", until),
  neighbours, h("button", { type: "submit" }, "Search"));
  return [h("h2", {}, `Conversation of ${user}`),
    h("p", {}, h("a", { href: `#/user/${enc(user)}` }, `back to ${user}`)),
    h("p", { class: "muted" }, "Every session's turns, ranked by words (BM25) and meaning (cosine), "
      + "fused. A time expression in the query (\"two weeks ago\", \"last May\") boosts the turns said "
      + "in its window (their time rank). Since and until are whole days in UTC, both inclusive."),
    form, results];
}

async function memoryView(user, id) {
  const base = `/v1/users/${enc(user)}/memory/${enc(id)}`;
  const latest = await api("GET", base);
  const showVersions = async (versions) => {
    const refs = [...new Set(versions.flatMap((v) => v.evidence.filter((e) => e.source === "snapshot").map((e) => e.ref)))];
    const snapshots = Object.fromEntries(await Promise.all(refs.map(async (ref) => {
      try { return [ref, await api("GET", `/v1/inspector/snapshots/${enc(ref)}`)]; } catch { return [ref, null]; }
    })));
    return h("div", { class: "versions" }, versions.map((v) => h("div", { class: `card version ${v.status}` },
      h("div", {}, h("b", {}, `v${v.version} `), h("span", { class: "tag" }, v.action), " ", v.status),
      h("p", {}, v.text),
      h("div", { class: "muted" }, `reinforced ${v.reinforcement_count}× · ${when(v.created_at)}`),
      h("div", { class: "dates" }, `said ${day(v.observed_at)} · holds / happened ${eventText(v.event)}`
        + ` · about ${about(v)}`),
      v.reason ? h("div", {}, `reason: ${v.reason}`) : null,
      h("h3", {}, "Evidence"),
      v.evidence.map((e) => h("div", { class: "evidence" },
        h("div", { class: "muted" }, `${e.source} ${e.session_id || ""} · said ${when(e.at)}`),
        e.text ? h("div", {}, e.text) : null,
        e.source === "snapshot" && snapshots[e.ref]
          ? h("div", { class: "snapshot" }, snapshots[e.ref].turns.map((turn) => h("div", { class: "turn" },
            h("b", {}, `${turn.seq} ${turn.speaker || turn.role}: `), turn.content)))
          : null)))));
  };
  const versions = await paged("versions", showVersions, byOffset(`${base}/history`), "no version");
  const showDecisions = (decisions) => table(
    ["at", "action", "version", "key match", "similarity", "scores", "judged", "reason", "differences"],
    decisions.map((d) => [when(d.at), d.action, d.base_version ? `${d.base_version} → ${d.version}` : d.version,
      d.key_match ? "yes" : "no", num(d.similarity),
      d.scores.map((s) => h("div", {}, `${s.memory_id.slice(0, 12)} v${s.version}: ${num(s.similarity)}${s.key_match ? " (key)" : ""}`)),
      d.judged ? "judge" : (d.needs_judge ? "needs judge" : "rules"), d.reason, d.differences.join("; ")]));
  const decisions = await paged("decisions", showDecisions, async (offset) => {
    const from = offset || 0;
    const log = await api("GET", `/v1/inspector/memories/${enc(id)}/decisions?limit=${PAGE}&offset=${from}`);
    const t = log.thresholds;
    return { items: log.decisions, next: from + PAGE < log.total ? from + PAGE : null,
      head: h("p", { class: "muted", id: "thresholds" },
        `${log.total} decisions; thresholds: ambiguous at ≥ ${t.ambiguous_at}, floor ${t.floor}, ${t.neighbours} neighbours`) };
  }, "no decision recorded");
  const remove = latest.status === "current" ? confirmed({
    id: "delete-memory", label: "Delete memory", reason: true,
    warning: `Delete ${latest.memory_type} memory ${latest.key}: a DELETE version closes its history `
      + "(the versions stay), and the decision log records the deletion."
      + (latest.memory_type === "taxonomic" ? " It is the project's: it goes for every user." : ""),
    act: async (why) => {
      const r = await api("DELETE", why ? `${base}?reason=${enc(why)}` : base);
      setTimeout(render, 0);  // shows the DELETE version and its decision
      return h("p", { class: "done" }, `deleted: version ${r.version}`);
    },
  }) : h("p", { class: "muted", id: "not-current" }, `this memory is ${latest.status}`);
  return [h("h2", {}, `Memory ${latest.key}`),
    h("p", { class: "muted" }, `${latest.memory_type} · ${id}`),
    h("h3", {}, "Versions"), versions,
    h("h3", {}, "Decision log"), decisions,
    h("h3", {}, "Delete"), remove];
}

async function pipelineView() {
  let first = await api("GET", `/v1/inspector/pipeline?limit=${PAGE}&offset=0`);
  const s = first;
  const letters = await paged("dead-letters", (items) =>
    table(["failed at", "stage", "source", "error", "attempts", "retriable"], items.map((d) => [
      when(d.failed_at), d.stage, `${d.source_topic}[${d.source_partition}]@${d.source_offset}`,
      `${d.error_class}: ${d.error}`, d.attempts, d.retriable ? "yes" : "no"])),
  async (offset) => {
    const from = offset || 0;
    const page = first || await api("GET", `/v1/inspector/pipeline?limit=${PAGE}&offset=${from}`);
    first = null;  // the first page came with the status; later ones are read again
    return { items: page.dead_letters, next: from + PAGE < page.project_dead_letters ? from + PAGE : null };
  }, "none");
  // stages and local servers are few (one row each): their tables are not paged
  return [h("h2", {}, "Pipeline"),
    s.problems.map((p) => h("p", { class: "error" }, p)),
    h("h3", {}, "Consumer lag per group"),
    table(["group", "topic", "lag", "committed", "end"], s.groups.map((g) => [g.group, g.topic, g.lag, g.committed, g.end])),
    h("h3", {}, "Dead letters (records ever written, all projects)"),
    table(["stage", "count"], Object.entries(s.dead_letter_counts)),
    h("h3", {}, `This project's recent dead letters: ${s.project_dead_letters} (${s.hidden_dead_letters} of other projects hidden)`),
    letters,
    h("h3", {}, "Stage restarts"),
    s.restarts.length ? table(["stage", "restarts", "last error", "last at"], s.restarts.map((r) => [
      r.stage, r.restarts, r.last_error, when(r.last_at)])) : h("p", { class: "muted" }, "no restart recorded"),
    h("h3", {}, "Local servers and stage processes (restarts counted by the supervisor of mongomem up)"),
    s.processes.length ? h("div", { id: "processes" },
      table(["process", "state"], s.processes.map((p) => [p.name, p.state])))
      : h("p", { class: "muted", id: "no-processes" }, "none started here (mongomem up)")];
}

async function playgroundView() {
  const byId = {};  // the spaces of the pages seen
  // a page of the project's spaces: the picker offers this page's
  const spaces = await paged("spaces", (items) => {
    for (const s of items) byId[s.space_id] = s;
    return [h("div", { class: "inline" }, h("label", {}, "space "),
      h("select", { id: "space" }, items.map((s) => h("option", { value: s.space_id }, `${s.name} (${s.kind})`)))),
    table(["space", "kind", "items", "threshold"], items.map((s) => [
      s.space_id, s.kind, s.item_count, num(s.recall.threshold)]))];
  }, byOffset("/v1/spaces"), "this project has no spaces");
  const inputs = h("textarea", { id: "inputs" }, "{}");
  const out = h("div", { id: "playground-results" });
  const hitsTable = (hits) => table(["score", "meaning", "keyword", "inputs", "outcome"], hits.map((hit) => [
    num(hit.score), num(hit.meaning), num(hit.keyword), JSON.stringify(hit.item.inputs),
    hit.item.outcome || hit.item.resolution || ""]));
  // why a recall has no match: an empty space, or the best score under the threshold
  function noMatch(chosen, r) {
    const threshold = r.escalation ? r.escalation.threshold : chosen.recall.threshold;
    const best = [...r.matches, ...r.near_misses].sort((a, b) => b.score - a.score)[0];
    if (!chosen.item_count) {
      return chosen.kind === "escalation" ? "no match: no resolution is stored in this space yet"
        : "no match: this space has no items yet";
    }
    if (!best) return `no match: no item of the ${chosen.item_count} scored for these inputs`;
    return `no match: the best score ${num(best.score)} is below the space's threshold ${num(threshold)}`;
  }
  async function run(path) {
    try {
      const picked = document.getElementById("space");
      if (!picked) throw new ApiError("this project has no spaces");
      const chosen = byId[picked.value];
      const body = { inputs: JSON.parse(inputs.value) };
      const r = await api("POST", `/v1/spaces/${enc(picked.value)}/${path}`, body);
      if (path === "playground") {
        // no null child: replaceChildren would show it as the text "null"
        out.replaceChildren(...[h("h3", {}, `Matches (${r.matches.length})`),
          r.matches.length ? hitsTable(r.matches) : h("p", { class: "muted", id: "no-match" }, noMatch(chosen, r)),
          h("h3", {}, `Near misses (${r.near_misses.length})`),
          r.near_misses.length ? hitsTable(r.near_misses) : h("p", { class: "muted" }, "none"),
          r.escalation ? escalation(r.escalation) : null].filter((x) => x !== null));
      } else out.replaceChildren(escalation(r));
    } catch (err) { out.replaceChildren(h("p", { class: "error" }, err.message)); }
  }
  const escalation = (e) => h("div", { class: "card escalation" },
    h("b", {}, e.apply ? `apply: ${e.outcome}` : "escalate (no resolution applies)"),
    h("div", { class: "muted" }, `threshold ${num(e.threshold)}; top score ${e.top ? num(e.top.score) : "–"}`),
    e.top ? h("div", {}, `best resolution: ${e.top.item.resolution || e.top.item.outcome || "–"} `
      + `for ${JSON.stringify(e.top.item.inputs)}`) : null);
  return [h("h2", {}, "Memory-space playground"),
    spaces, h("label", {}, "inputs (JSON object)"), inputs,
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
  [/^#\/turns\/([^/]+)$/, turnsView],
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
