// enrich-proxy's window: recent decisions, the context window as a bar, a preview playground.
// Plain DOM code: every text from a request (file names, snippets, errors) goes in as
// textContent, never as HTML, since documents and callers are untrusted.
"use strict";

const REFRESH_MS = 3000;
const KEY_STORE = "enrich-proxy-key";
const UNDECIDED = "undecided";
const PARTS = [
  ["system", "system"],
  ["history", "history"],
  ["documents", "documents"],
  ["question", "question"],
  ["answer_room", "room for the answer"],
];

// What each timed step does, shown on hover over its time (proxy/pipeline/flow.py's stages).
const STAGE_TITLES = {
  validate: "the body is a chat request the proxy can work on",
  options: "the model's defaults, the X-Enrich-* headers and the body's enrich object",
  references: "file parts, file ids and #file: paths read into bytes",
  names: "each document's name (its own, document-N, or its title)",
  documents: "new documents parsed into text (cached by content)",
  stores: "the vector stores to search",
  count: "the conversation and the documents counted in the model's tokens",
  decide: "the 70 % rule: whole documents, retrieval, or nothing",
  search: "who writes the searches: the model in a tool loop, or the proxy once",
  shape: "the prompt's shape: the chat prompts, or a text a base model continues",
  sight: "whether the model sees images, when the documents' drawn pages may go",
  inject: "the documents put into the prompt whole, or the model offered its search function",
  query: "what is searched: the question, its conversation, a standalone question, translations",
  retrieve: "the documents and vector stores searched, their hits ranked into candidates",
  passages: "the candidates fitted into the passage budget and cited in the prompt",
  pages: "drawn pages as images, for a model that sees",
  window: "how the prompt fills the context window",
  adapt: "the oldest turns dropped if they do not fit; a text prompt rendered for a text-completion upstream or a base model",
  settle: "the window measured again after adapt",
  fit: "the prompt checked against the window the server really runs with",
  cite: "the sources header, and the Sources block when asked for",
};

const $ = (id) => document.getElementById(id);
const fmt = new Intl.NumberFormat();
const n = (value) => (value === null || value === undefined ? "?" : fmt.format(value));

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

function bytes(size) {
  if (size === null || size === undefined) return "";
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${(size / 1024).toFixed(1)} KB`;
  return `${(size / 1024 / 1024).toFixed(1)} MB`;
}

// -- the key ----------------------------------------------------------------------------------

function storedKey() {
  return sessionStorage.getItem(KEY_STORE);
}

function headers(extra = {}) {
  const key = storedKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

function askForKey(message) {
  $("key-prompt").hidden = false;
  $("requests").hidden = true;
  $("playground").hidden = true;
  $("key-error").textContent = message || "";
  $("key-input").focus();
}

function keyAccepted() {
  $("key-prompt").hidden = true;
  $("requests").hidden = false;
  $("playground").hidden = false;
  $("forget-key").hidden = !storedKey();
}

// -- rendering one decision -------------------------------------------------------------------

function windowBar(share) {
  const box = el("div", { class: "window" });
  if (!share) return box;
  const total = share.context_window
    || PARTS.reduce((sum, [part]) => sum + (part === "answer_room" ? 0 : share[part] || 0), 0);
  const estimated = new Set(share.estimated || []);
  const bar = el("div", { class: "bar", role: "img" });
  const legend = el("div", { class: "legend" });
  const described = [];
  for (const [part, label] of PARTS) {
    const tokens = share[part];
    if (tokens === null || tokens === undefined) continue;
    const percent = total ? Math.min(100, (100 * tokens) / total) : 0;
    const guess = estimated.has(part) ? " (estimated)" : "";
    const title = `${label}: ${n(tokens)} tokens, ${percent.toFixed(1)}% of the window${guess}`;
    const seg = el("div", {
      class: `seg ${part}${tokens > 0 ? " nonzero" : ""}${guess ? " estimated" : ""}`,
      title,
      "data-part": part,
      "data-tokens": String(tokens),
    });
    // CSSOM, not a style attribute: allowed under the page's Content-Security-Policy.
    seg.style.width = `${percent}%`;
    bar.append(seg);
    legend.append(el("span", { title }, el("i", { class: `key ${part}` }), `${label} ${n(tokens)}${guess ? "*" : ""}`));
    described.push(`${label} ${n(tokens)}`);
  }
  const of = share.context_window ? `of ${n(share.context_window)} tokens` : "window unknown";
  legend.append(el("span", { class: "of", text: of }));
  if (share.max_tokens) legend.append(el("span", { text: `max_tokens ${n(share.max_tokens)}` }));
  bar.setAttribute("aria-label", `context window ${of}: ${described.join(", ")}`);
  box.append(bar, legend);
  if (estimated.size) {
    // What the star means, on the card itself and not only on hover.
    const said = `* estimated, not counted by the model's tokenizer${share.note ? `: ${share.note}` : ""}`;
    box.append(el("p", { class: "estimate-note", text: said }));
    box.title = said;
  }
  return box;
}

function budgetLine(decision) {
  if (decision.available_tokens === undefined) return null;
  const needed = (decision.file_tokens || 0) + (decision.prompt_tokens || 0);
  const exact = decision.counts_exact ? "" : " (estimated by tiktoken)";
  if (decision.context_window === null) {
    return el("p", { class: "budget", text: `context window unknown (${decision.context_window_source}): retrieval` });
  }
  const rule =
    `needed ${n(needed)} tokens (files ${n(decision.file_tokens)} + prompt ${n(decision.prompt_tokens)})` +
    ` ${needed > decision.available_tokens ? ">" : "≤"} available ${n(decision.available_tokens)}` +
    ` = ⌊remaining ${n(decision.remaining_context)} × 0.7 × (1 − ${decision.occupied_percent}% occupied)⌋;` +
    ` window ${n(decision.context_window)} from ${decision.context_window_source},` +
    ` ${n(decision.tokens_in_context)} already in context; counted by ${decision.counter}${exact}`;
  const why =
    "The documents go in whole when they and the question need at most what is available: 70 % of " +
    "the window the conversation leaves free, reduced by the share of the window it already " +
    `occupies (${decision.occupied_percent}%: ${n(decision.tokens_in_context)} of ${n(decision.context_window)} tokens). ` +
    "Otherwise only the passages closest to the question go in (retrieval).";
  return el("p", { class: "budget", text: rule, title: why });
}

function documentList(record) {
  const list = el("ul", { class: "docs" });
  const perFile = record.decision.file_tokens_per_file || {};
  for (const doc of record.documents || []) {
    const tokens = perFile[doc.name];
    list.append(
      el("li", {},
        el("span", { class: "name doc-name", title: doc.name, text: doc.name }),
        doc.pages !== null && doc.pages !== undefined ? el("span", { class: "num", text: `${n(doc.pages)} ${doc.pages === 1 ? "page" : "pages"}` }) : null,
        el("span", { class: "num", text: bytes(doc.bytes) }),
        typeof tokens === "number" ? el("span", { class: "num", text: `${n(tokens)} tokens` }) : null,
        doc.new ? null : el("span", { class: "old", text: "earlier message" }),
      ),
    );
  }
  return list.childElementCount ? list : null;
}

function passagesTable(retrieval) {
  if (!retrieval || !retrieval.candidates) return null;
  const candidates = retrieval.candidates;
  const kept = candidates.filter((c) => c.outcome === "kept" || c.outcome === "shortened").length;
  const box = el("details", { class: "passages" });
  box.append(el("summary", { text: `Passages: ${kept} of ${candidates.length} candidates kept` }));
  box.append(el("p", {
    class: "budget",
    text: `threshold ${retrieval.affinity_threshold} · budget ${n(retrieval.budget_limit)} ${retrieval.budget_unit}` +
      ` · ${retrieval.limit} per file · left out ${n(retrieval.left_out)} · embedder ${retrieval.embedder}`,
  }));
  // A follow-up is searched with its conversation too: each text with its weight in the fusion.
  const searched = retrieval.searched || [];
  if (searched.length > 1) {
    const list = el("ul", { class: "searched" });
    for (const s of searched) {
      // Carried words: the ones each file was searched with, by words alone.
      const words = Object.entries(s.words || {}).map(([file, w]) => `${w.join(" ")} (${file})`);
      list.append(el("li", { "data-from": s.from },
        el("span", { class: "num", text: `${s.from} ×${s.weight}` }), " ",
        el("span", { class: "searched-text", text: s.text }),
        words.length ? el("span", { class: "searched-words", text: ` + ${words.join("; ")}` }) : null));
    }
    box.append(el("p", { class: "budget", text: "searched for:" }), list);
  }
  // A follow-up that leans on its conversation: what became of its standalone question.
  const rewrite = retrieval.rewrite;
  if (rewrite) {
    const said = rewrite.outcome === "rewritten"
      ? ` (rewritten by ${rewrite.model || "the model"}${rewrite.cached ? ", remembered" : ""}): ${rewrite.text}`
      : `: ${rewrite.outcome} (${rewrite.why})`;
    const seconds = typeof rewrite.seconds === "number" && !rewrite.cached ? ` · ${rewrite.seconds.toFixed(2)} s` : "";
    box.append(el("p", { class: "budget rewrite", "data-outcome": rewrite.outcome, text: `standalone question${said}${seconds}` }));
  }
  // How much of each file was ranked by meaning: a large new document answers from its
  // candidates while the rest is embedded in the background.
  const indexing = retrieval.indexing || {};
  Object.entries(retrieval.places || {}).forEach(([file, place]) => {
    box.append(el("p", { class: "place-asked", text: `${file}: the question names ${place}` }));
  });
  Object.entries(retrieval.indexed || {}).forEach(([file, percent]) => {
    const how = indexing[file] ? ` (${indexing[file]})` : "";
    box.append(el("p", {
      class: percent < 100 ? "index-ready partial" : "index-ready",
      text: `${file}: dense index ${percent}% ready when asked${how}`,
    }));
  });
  const table = el("table", {},
    el("thead", {}, el("tr", {},
      el("th", { class: "n", text: "#" }), el("th", { text: "file" }), el("th", { text: "where" }),
      el("th", { class: "n", text: "score" }), el("th", { text: "outcome" }), el("th", { text: "snippet" }))));
  const body = el("tbody");
  candidates.forEach((c, index) => {
    const snippet = c.snippet || "";
    body.append(el("tr", { class: "candidate" },
      el("td", { class: "n", text: String(index + 1) }),
      el("td", {}, el("span", { class: "name", title: c.file, text: c.file })),
      el("td", {}, el("span", { class: "name", title: c.location || "", text: c.location || `page=${n(c.page)}` })),
      el("td", { class: "n", text: Number(c.score).toFixed(3) }),
      // A whole-document question's opening and conclusion, and the place a question names,
      // pass by where they sit, not their score.
      el("td", {
        class: `outcome ${String(c.outcome).replace(/ /g, "-")}`,
        text: c.place ? `${c.outcome} · the place asked for`
          : c.overview ? `${c.outcome} · whole-document question` : c.outcome,
      }),
      el("td", { class: "snippet", title: snippet }, el("span", { class: "snippet-text", text: snippet })),
    ));
  });
  table.append(body);
  box.append(el("div", { class: "table-wrap" }, table));
  return box;
}

function timingsLine(timings) {
  const entries = Object.entries(timings || {});
  if (!entries.length) return null;
  const all = entries.map(([stage, seconds]) => `${stage} ${(seconds * 1000).toFixed(2)} ms`);
  const line = el("div", { class: "timings", title: `time in each stage: ${all.join(", ")}` });
  // Stages that took no measurable time are left out of the line (they are in its title).
  for (const [stage, seconds] of entries) {
    if (seconds < 0.00005) continue;
    const what = STAGE_TITLES[stage];
    line.append(el("span", {
      class: "stage",
      text: `${stage} ${(seconds * 1000).toFixed(1)} ms`,
      title: what ? `${stage}: ${what}` : stage,
    }));
  }
  return line;
}

function guardLine(guard) {
  const parts = [];
  for (const [file, kinds] of Object.entries(guard || {})) {
    for (const [kind, count] of Object.entries(kinds)) {
      if (count) parts.push(`${file}: ${count} ${kind.replace(/_/g, " ")}`);
    }
  }
  return parts.length ? el("p", { class: "budget guard", text: `guard changes: ${parts.join(", ")}` }) : null;
}

function imagesLine(images) {
  if (!images) return null;
  const cost = images.image_tokens === "counted by the upstream"
    ? "images counted by the upstream"
    : `image cost: ${images.image_tokens}${images.estimated ? " (estimated)" : ""}, ${images.image_tokens_source}`;
  if (!images.sees) {
    return el("p", { class: "budget images", text: `page images: none — the model does not see (${images.source})` });
  }
  const pages = (images.pages || []).map(
    (p) => `${p.file} p.${p.page} (${p.reason}, ${p.detail} ${p.width}×${p.height}, ${n(p.tokens)} tokens, ${bytes(p.bytes)})`);
  const out = (images.left_out || []).map((p) => `${p.file} p.${p.page} (${p.why})`);
  const room = images.room === null || images.room === undefined ? "" : ` of ${n(images.room)} room`;
  const text =
    `page images: ${pages.length ? pages.join(", ") : "none sent"} — ${n(images.tokens)} tokens${room};` +
    ` the model sees (${images.source}); ${cost}` +
    (out.length ? `; left out: ${out.join(", ")}` : "") + (images.note ? `; ${images.note}` : "");
  return el("p", { class: "budget images", text });
}

function plural(count, word) {
  return `${n(count)} ${word}${count === 1 ? "" : "s"}`;
}

// One search the model wrote: each query it asked, what came back, or what it was told instead.
function searchCall(call) {
  const item = el("li", { class: `search-call${call.error ? " failed" : ""}` });
  if (call.error) {
    item.append(el("span", { class: "search-error", text: call.error }));
    return item;
  }
  call.queries.forEach((query, index) => {
    if (index) item.append(", ");
    item.append(el("q", { class: "search-query", title: query, text: query }));
  });
  const more = [
    call.left_out ? `${n(call.left_out)} left out` : "",
    call.found !== call.given ? `${n(call.found)} found` : "",
  ].filter(Boolean);
  item.append(el("span", {
    class: "num search-given",
    "data-given": String(call.given),
    text: ` → ${plural(call.given, "passage")}${more.length ? ` (${more.join(", ")})` : ""}`,
  }));
  return item;
}

// Who wrote the searches, and for a model that wrote them, each one by the turn it was made in.
function searchesLine(searches) {
  if (!searches) return null;
  const budget = searches.budget_limit
    ? ` · ${n(searches.budget_used)} of ${n(searches.budget_limit)} ${searches.budget_unit}` : "";
  const written = searches.written_calls
    ? ` · ${plural(searches.written_calls, "call")} written as text, read by the proxy` : "";
  const text =
    `searches (${searches.mode}): ${searches.reason}` +
    (searches.mode === "tool" ? ` · ${plural(searches.rounds, "turn")}${budget}${written}` : "") +
    (searches.searched_for_model ? `; ${searches.searched_for_model}` : "") +
    (searches.forced ? `; answer asked without tools: ${searches.forced}` : "") +
    (searches.stopped ? `; ${searches.stopped}` : "");
  const box = el("div", { class: "budget searches", "data-mode": searches.mode });
  box.append(el("p", { class: "searches-head", text }));
  const byRound = new Map();
  for (const call of searches.calls || []) {
    if (!byRound.has(call.round)) byRound.set(call.round, []);
    byRound.get(call.round).push(call);
  }
  if (byRound.size) {
    const rounds = el("ol", { class: "search-rounds" });
    for (const [round, calls] of byRound) {
      rounds.append(el("li", { class: "search-round", "data-round": String(round) },
        el("span", { class: "num", text: `turn ${round}` }),
        el("ul", { class: "search-calls" }, ...calls.map(searchCall))));
    }
    box.append(rounds);
  }
  return box;
}

function promptLine(prompt) {
  if (!prompt) return null;
  const sampling = prompt.sampling ? `; sampling: ${prompt.sampling}` : "";
  const text = prompt.shape === "completion"
    ? `prompt: completion-shaped (passages, Question:, Answer:) — ${prompt.reason}${sampling}`
    : `prompt: chat (the citation prompts) — ${prompt.reason}`;
  return el("p", { class: "budget prompt", text });
}

// A Responses turn chained to earlier ones the upstream keeps: what the proxy kept of them.
function chainLine(chain) {
  if (!chain) return null;
  const files = chain.files.length ? `; files searched again: ${chain.files.join(", ")}` : "";
  const missed = [...chain.not_kept, ...chain.deleted];
  const left = missed.length ? `; not searched: ${missed.join(", ")}` : "";
  const text = `chained to ${chain.id} (${chain.from}): searched with ${plural(chain.messages, "earlier message")}` +
    ` the proxy kept${files}${left}`;
  return el("p", { class: "budget chain", text });
}

function renderRecord(record, showCaller) {
  const d = record.decision || {};
  const strategy = record.strategy || UNDECIDED;
  const failed = record.status >= 400 || record.error;
  const when = new Date(record.time * 1000);
  const head = el("header", { class: "card-head" },
    el("time", { datetime: when.toISOString(), text: when.toLocaleTimeString() }),
    el("span", { class: "model", text: record.model || "(no model)" }),
    el("span", { class: `badge strategy ${strategy}`, text: strategy }),
    el("span", { class: "right" },
      showCaller ? el("span", { class: "caller", text: record.caller }) : null,
      el("span", { class: `num ${failed ? "status-bad" : ""}`, text: String(record.status) }),
      el("span", { class: "num", text: `${record.duration_s.toFixed(2)} s` }),
    ),
  );
  const why = d.reason ? `${strategy} — ${d.reason}` : "failed before a strategy was chosen";
  const cites = (record.citations || []).map((c) => el("li", { text: c }));
  const warnings = (record.warnings || []).map((w) => el("li", { text: w }));
  const question = record.question
    ? el("p", { class: "asked", text: record.question, title: record.question })
    : null;
  return el("li", { class: `card${failed ? " failed" : ""}`, "data-id": record.request_id, "data-strategy": strategy },
    head,
    question,
    el("p", { class: "reason", text: why }),
    documentList(record),
    chainLine(d.chain),
    budgetLine(d),
    promptLine(d.prompt),
    windowBar(d.window),
    record.error ? el("p", { class: "failure", text: record.error }) : null,
    warnings.length ? el("ul", { class: "warnings" }, ...warnings) : null,
    guardLine(d.guard),
    imagesLine(d.images),
    searchesLine(d.searches),
    cites.length ? el("ol", { class: "citations" }, ...cites) : null,
    timingsLine(record.timings_s),
    passagesTable(d.retrieval),
  );
}

// -- recent requests --------------------------------------------------------------------------

const shown = new Map(); // request id -> its card, reused so open details stay open
let records = [];
let caller = null;

function fillFilter(select, values) {
  const wanted = ["", ...[...values].sort()];
  const have = [...select.options].map((o) => o.value);
  if (wanted.join("\n") === have.join("\n")) return; // unchanged: don't disturb an open select
  const current = select.value;
  select.replaceChildren(...wanted.map((v) => el("option", { value: v, text: v || "all" })));
  select.value = wanted.includes(current) ? current : "";
}

function renderRecords() {
  fillFilter($("filter-model"), new Set(records.map((r) => r.model || "(no model)")));
  fillFilter($("filter-strategy"), new Set(records.map((r) => r.strategy || UNDECIDED)));
  const model = $("filter-model").value;
  const strategy = $("filter-strategy").value;
  const visible = records.filter(
    (r) => (!model || (r.model || "(no model)") === model) && (!strategy || (r.strategy || UNDECIDED) === strategy),
  );
  const list = $("request-list");
  const wanted = visible.map((record) => {
    let card = shown.get(record.request_id);
    if (!card) {
      card = renderRecord(record, caller && caller.admin);
      shown.set(record.request_id, card);
    }
    return card;
  });
  // Insert and remove only what changed: cards already on screen are not rebuilt.
  wanted.forEach((card, index) => {
    if (list.children[index] !== card) list.insertBefore(card, list.children[index] || null);
  });
  while (list.children.length > wanted.length) list.lastElementChild.remove();
  const ids = new Set(records.map((r) => r.request_id));
  for (const id of [...shown.keys()]) if (!ids.has(id)) shown.delete(id);
  $("empty").hidden = records.length > 0;
  $("count").textContent = records.length ? `${visible.length} of ${records.length}` : "";
}

async function refresh() {
  let response;
  try {
    response = await fetch("/v1/enrich/decisions?limit=200", { headers: headers(), cache: "no-store" });
  } catch (error) {
    $("requests-error").textContent = `The proxy did not answer: ${error.message}`;
    return;
  }
  if (response.status === 401) {
    const hadKey = Boolean(storedKey());
    sessionStorage.removeItem(KEY_STORE);
    askForKey(hadKey ? "That key was not accepted." : "");
    return;
  }
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    $("requests-error").textContent = (payload.error && payload.error.message) || `HTTP ${response.status}`;
    return;
  }
  $("requests-error").textContent = "";
  keyAccepted();
  caller = payload.caller;
  $("who").textContent = caller && caller.name !== "anonymous" ? `key: ${caller.name}${caller.admin ? " (admin)" : ""}` : "";
  records = payload.data || [];
  renderRecords();
}

// -- playground -------------------------------------------------------------------------------

let chosen = []; // [{name, size, dataUrl}]

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ name: file.name, size: file.size, dataUrl: reader.result });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function addFiles(files) {
  for (const file of files) chosen.push(await readFile(file));
  showChosen();
}

function showChosen() {
  const list = $("play-file-list");
  list.replaceChildren(...chosen.map((file, index) => {
    const drop = el("button", { type: "button", class: "link", title: `remove ${file.name}`, text: "×" });
    drop.addEventListener("click", () => { chosen.splice(index, 1); showChosen(); });
    return el("li", {}, el("span", { class: "name", title: file.name, text: file.name }), el("span", { class: "num muted", text: bytes(file.size) }), drop);
  }));
  $("drop-text").textContent = chosen.length ? "Add more files" : "Choose or drop files here";
}

function playBody(stream) {
  const content = [{ type: "text", text: $("play-question").value }];
  for (const file of chosen) {
    content.push({ type: "file", file: { filename: file.name, file_data: file.dataUrl } });
  }
  const enrich = { strategy: $("play-strategy").value };
  const limit = parseInt($("play-limit").value, 10);
  if (limit) enrich.retrieval_limit = limit;
  const threshold = $("play-threshold").value;
  if (threshold !== "") enrich.affinity_threshold = Number(threshold);
  const body = { model: $("play-model").value || "any", messages: [{ role: "user", content }], enrich };
  if (stream) body.stream = true;
  return body;
}

async function errorOf(response) {
  const payload = await response.json().catch(() => null);
  return (payload && payload.error && payload.error.message) || `HTTP ${response.status}`;
}

function busy(state) {
  $("play-preview").disabled = Boolean(state);
  $("play-send").disabled = Boolean(state);
  $("play-state").textContent = state || "";
}

async function preview(event) {
  event.preventDefault();
  $("play-error").textContent = "";
  busy("Previewing…");
  try {
    const response = await fetch("/v1/enrich/preview", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(playBody(false)),
    });
    if (response.status === 401) return askForKey("That key was not accepted.");
    if (!response.ok) throw new Error(await errorOf(response));
    const result = await response.json();
    const record = {
      request_id: result.request_id,
      time: Date.now() / 1000,
      caller: "",
      status: 200,
      duration_s: Object.values(result.timings_s || {}).reduce((a, b) => a + b, 0),
      model: result.upstream.body.model || $("play-model").value,
      documents: chosen.map((f) => ({ name: f.name, bytes: f.size, pages: null, new: true })),
      strategy: result.strategy,
      decision: result.decision,
      timings_s: result.timings_s,
      citations: result.citations,
      warnings: [],
      question: $("play-question").value,
    };
    $("play-decision").replaceChildren(el("ol", { class: "cards" }, renderRecord(record, false)));
    $("play-url").textContent = `POST ${result.upstream.url}`;
    $("play-body").textContent = JSON.stringify(result.upstream.body, null, 2);
    $("play-result").hidden = false;
  } catch (error) {
    $("play-error").textContent = error.message;
  } finally {
    busy("");
  }
}

function handleEvent(event, answer) {
  const lines = event.split("\n");
  for (const line of lines) {
    if (line.startsWith(":")) {
      $("play-progress").textContent = line.slice(1).trim();
      continue;
    }
    if (!line.startsWith("data:")) continue;
    const data = line.slice(5).trim();
    if (data === "[DONE]") return true;
    let chunk;
    try { chunk = JSON.parse(data); } catch { continue; }
    if (chunk.error) throw new Error(chunk.error.message || "the stream ended with an error");
    if (Array.isArray(chunk.citations)) {
      $("play-citations").replaceChildren(...chunk.citations.map((c) => el("li", { text: c })));
    }
    const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
    if (delta && typeof delta.content === "string") answer.textContent += delta.content;
  }
  return false;
}

async function sendForReal() {
  $("play-error").textContent = "";
  const answer = $("play-answer");
  answer.textContent = "";
  $("play-citations").replaceChildren();
  $("play-progress").textContent = "";
  $("play-answer-box").hidden = false;
  busy("Sending…");
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(playBody(true)),
    });
    if (response.status === 401) return askForKey("That key was not accepted.");
    if (!response.ok) throw new Error(await errorOf(response));
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (handleEvent(event, answer)) break;
      }
    }
    if (buffer.trim()) handleEvent(buffer, answer);
    $("play-progress").textContent = "done";
  } catch (error) {
    $("play-error").textContent = error.message;
  } finally {
    busy("");
    refresh();
  }
}

async function loadModels() {
  try {
    const response = await fetch("/v1/models", { headers: headers() });
    if (!response.ok) return;
    const payload = await response.json();
    const ids = (payload.data || []).map((m) => m.id).filter((id) => typeof id === "string");
    $("models").replaceChildren(...ids.map((id) => el("option", { value: id })));
    if (ids.length && $("play-model").value === "any") $("play-model").value = ids[0];
  } catch {
    // No model list: the field stays free text.
  }
}

// -- wiring -----------------------------------------------------------------------------------

function start() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORE, $("key-input").value.trim());
    $("key-input").value = "";
    refresh().then(loadModels);
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE);
    records = [];
    shown.clear();
    $("request-list").replaceChildren();
    $("who").textContent = "";
    askForKey("");
  });
  $("filter-model").addEventListener("change", renderRecords);
  $("filter-strategy").addEventListener("change", renderRecords);
  $("play-form").addEventListener("submit", preview);
  $("play-send").addEventListener("click", sendForReal);
  $("play-files").addEventListener("change", (event) => {
    addFiles([...event.target.files]);
    event.target.value = "";
  });
  const drop = $("drop");
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    addFiles([...event.dataTransfer.files]);
  });
  setInterval(() => {
    if ($("live").checked && !document.hidden && $("key-prompt").hidden) refresh();
  }, REFRESH_MS);
  refresh().then(loadModels);
}

start();
