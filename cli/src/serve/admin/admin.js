// hostpipe's admin page: plain DOM, no build step. Everything a server or the API sent
// is shown with textContent (never as HTML); images only as data: URLs of the converted
// bytes. The token stays in this tab (sessionStorage). Questions of running turns
// (consent, elicitation) are polled: every 5 s, every second while a turn or a tool call
// started here waits.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("hostpipe-token") || "";
let current = null; // { server, uri } or { server, template, arguments }
let historyOffset = 0;
let callsOffset = 0;
let pinsOffset = 0;
let waiting = 0; // requests started here still running (turns, tool calls)
let pipelines = [];

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c ?? ""));
  return e;
}

// Unix ms as `2026-12-02 01:23:45Z`.
function time(ms) {
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function showError(message) {
  const p = $("error");
  p.textContent = message;
  p.hidden = !message;
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: `Bearer ${token}` } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let doc = null;
  try {
    doc = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON (a proxy's error page): its status and first words are the message.
  }
  if (!res.ok) {
    const e = doc && doc.error ? doc.error : { code: String(res.status), message: text.slice(0, 200) || res.statusText };
    const err = new Error(`${method} ${path}: ${e.message} (${e.code})`);
    err.code = e.code;
    throw err;
  }
  if (text && doc === null) throw new Error(`${method} ${path}: the answer is not JSON`);
  return doc;
}

async function guarded(f) {
  try {
    showError("");
    await f();
  } catch (e) {
    showError(e.message);
  }
}

// ---- servers ------------------------------------------------------------------------

async function loadServers() {
  const { servers } = await api("GET", "/v1/servers");
  const ul = $("servers");
  ul.replaceChildren();
  for (const s of servers) {
    const state = s.status.state;
    const why = s.status.reason ? `: ${s.status.reason}` : "";
    const button = el("button", { "data-server": s.name, onclick: () => guarded(() => browse(s.name)) }, s.name);
    const li = el("li", {}, button, el("span", { class: `status ${state}`, title: why }, state + why));
    if (state === "needs_login") {
      li.append(" ", el("button", { "data-login": s.name, onclick: () => guarded(() => logIn(s.name, li)) }, "log in"));
    }
    ul.append(li);
  }
}

// An OAuth login (POST /v1/servers/{server}/login): the authorization server's page
// opens in a new tab (with a link, in case pop-ups are blocked); its redirect comes
// back to /oauth/callback, and the server list is reloaded until the server connects.
async function logIn(server, li) {
  const started = await api("POST", `/v1/servers/${encodeURIComponent(server)}/login`);
  const link = el("a", { href: started.authorization_url, target: "_blank", rel: "noopener noreferrer" }, "open the login page");
  const note = started.persistent ? "" : " (HOSTPIPE_CREDENTIAL_KEY is not set: the login lasts until hostpipe restarts)";
  li.append(el("span", { class: "muted", "data-login-link": server }, " ", link, note));
  window.open(started.authorization_url, "_blank", "noopener,noreferrer");
  const until = Date.now() + started.expires_in_s * 1000;
  const poll = async () => {
    const { servers } = await api("GET", "/v1/servers");
    const s = servers.find((x) => x.name === server);
    if (s && s.status.state !== "needs_login") return loadServers();
    if (Date.now() < until) setTimeout(() => guarded(poll), 3000);
  };
  setTimeout(() => guarded(poll), 3000);
}

async function browse(server) {
  $("browse-section").hidden = false;
  $("server-name").textContent = server;
  $("template-form").hidden = true;
  const [{ resources }, { resource_templates }] = await Promise.all([
    api("GET", `/v1/servers/${encodeURIComponent(server)}/resources`),
    api("GET", `/v1/servers/${encodeURIComponent(server)}/resource-templates`),
  ]);
  const ul = $("resources");
  ul.replaceChildren();
  if (resources.length === 0) ul.append(el("li", { class: "muted" }, "none"));
  for (const r of resources) {
    const label = r.title || r.name;
    const button = el("button", { "data-uri": r.uri, onclick: () => guarded(() => preview({ server, uri: r.uri })) }, r.uri);
    ul.append(el("li", {}, button, el("span", { class: "muted" }, ` ${label} [${r.mime_type || "?"}]`)));
  }
  const tl = $("templates");
  tl.replaceChildren();
  if (resource_templates.length === 0) tl.append(el("li", { class: "muted" }, "none"));
  for (const t of resource_templates) {
    const button = el("button", { "data-template": t.uri_template, onclick: () => templateForm(server, t.uri_template) }, t.uri_template);
    tl.append(el("li", {}, button, el("span", { class: "muted" }, ` ${t.title || t.name}`)));
  }
  await Promise.all([loadTools(server), loadPrompts(server)]);
}

// A server without a capability lists nothing (409 `not_supported`): "none", not an error.
async function listOrNone(path, key) {
  try {
    return (await api("GET", path))[key];
  } catch (e) {
    if (e.code === "not_supported") return [];
    throw e;
  }
}

async function loadTools(server) {
  $("tool-form").hidden = true;
  $("tool-result").hidden = true;
  const tools = await listOrNone(`/v1/servers/${encodeURIComponent(server)}/tools`, "tools");
  const ul = $("tools");
  ul.replaceChildren();
  if (tools.length === 0) ul.append(el("li", { class: "muted" }, "none"));
  for (const t of tools) {
    const hints = [];
    if (t.annotations && t.annotations.read_only) hints.push("read-only");
    if (t.annotations && t.annotations.destructive) hints.push("destructive");
    const button = el("button", { "data-tool": t.name, onclick: () => toolForm(server, t.name) }, t.name);
    const li = el("li", {}, button);
    for (const h of hints) li.append(" ", el("span", { class: `badge ${h}` }, h));
    li.append(el("span", { class: "muted" }, ` ${t.title || t.description || ""}`));
    ul.append(li);
  }
}

async function loadPrompts(server) {
  const prompts = await listOrNone(`/v1/servers/${encodeURIComponent(server)}/prompts`, "prompts");
  const ul = $("prompts");
  ul.replaceChildren();
  if (prompts.length === 0) ul.append(el("li", { class: "muted" }, "none"));
  for (const p of prompts) {
    const args = (p.arguments || []).map((a) => (a.required ? `${a.name}*` : a.name)).join(", ");
    ul.append(el("li", { "data-prompt": p.name },
      el("code", {}, p.name), el("span", { class: "muted" }, `(${args}) ${p.title || p.description || ""}`)));
  }
}

function toolForm(server, name) {
  const form = $("tool-form");
  form.hidden = false;
  $("tool-name").textContent = `${server} / ${name}`;
  $("tool-status").textContent = "";
  form.onsubmit = (ev) => {
    ev.preventDefault();
    guarded(() => callTool(server, name));
  };
}

// The text of an MCP CallToolResult's content; other items by kind (never their bytes).
function toolResultText(result) {
  const parts = (result.content || []).map((c) => {
    if (c.type === "text") return c.text;
    if (c.type === "resource_link") return `[resource link ${c.uri}]`;
    if (c.type === "resource") return `[embedded resource ${c.resource && c.resource.uri}]`;
    return `[${c.type}${c.mimeType ? " " + c.mimeType : ""}]`;
  });
  return (result.isError ? "The tool reported an error:\n" : "") + parts.join("\n");
}

async function callTool(server, name) {
  let args;
  try {
    args = JSON.parse($("tool-arguments").value || "{}");
  } catch (e) {
    throw new Error(`the arguments are not JSON: ${e.message}`);
  }
  const body = { pipeline: $("tool-pipeline").value, arguments: args };
  const conversation = $("tool-conversation").value.trim();
  if (conversation) body.conversation_id = conversation;
  $("tool-status").textContent = "calling… (answer any question above)";
  $("tool-result").hidden = true;
  let doc;
  try {
    doc = await whileWaiting(() => api("POST", `/v1/servers/${encodeURIComponent(server)}/tools/${encodeURIComponent(name)}/call`, body));
  } finally {
    $("tool-status").textContent = "";
  }
  const out = $("tool-result");
  out.hidden = false;
  out.textContent = toolResultText(doc.result);
  $("tool-status").textContent = `done (turn ${doc.turn_id})`;
  await loadHistory(true);
}

// The variable names of an RFC 6570 template: `{+path}`, `{a,b}`, `{var:3}`, `{list*}`.
function templateVariables(template) {
  const names = [];
  for (const m of template.matchAll(/\{([^}]*)\}/g)) {
    for (let v of m[1].replace(/^[+#./;?&]/, "").split(",")) {
      v = v.replace(/(:\d+|\*)$/, "");
      if (v && !names.includes(v)) names.push(v);
    }
  }
  return names;
}

function templateForm(server, template) {
  const form = $("template-form");
  form.hidden = false;
  $("template-uri").textContent = template;
  const args = $("template-args");
  args.replaceChildren();
  for (const name of templateVariables(template)) {
    args.append(el("label", {}, `${name} `, el("input", { name, required: true, "data-arg": name })));
  }
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const values = {};
    for (const input of args.querySelectorAll("input")) values[input.name] = input.value;
    guarded(() => preview({ server, template, arguments: values }));
  };
}

// ---- preview and attach -------------------------------------------------------------

async function preview(target) {
  const body = target.template ? { template: target.template, arguments: target.arguments } : { uri: target.uri };
  const doc = await api("POST", `/v1/servers/${encodeURIComponent(target.server)}/resources/read`, body);
  current = target;
  $("preview-section").hidden = false;
  $("preview-uri").textContent = doc.uri;
  $("preview-model").textContent = `as model ${doc.model.name} would get it (vision: ${doc.model.vision ? "yes" : "no"})`;
  $("attach-status").textContent = "";
  const box = $("preview");
  box.replaceChildren();
  for (const c of doc.contents) {
    const head = el("p", { class: "muted" }, `${c.uri} · ${c.mime_type || "no MIME type"} · ${c.bytes} bytes · ${c.kind}`);
    box.append(head);
    if (c.kind === "image") {
      box.append(el("img", { class: "preview", alt: c.uri, src: `data:${c.image.mime_type};base64,${c.image.data}` }));
      box.append(el("p", { class: "muted" }, `${c.image.width}×${c.image.height} px`));
    } else if (c.kind === "text") {
      box.append(el("pre", { "data-kind": "text" }, c.text));
    } else {
      const why = c.reason ? c.reason.kind : c.error;
      box.append(el("div", { class: "fallback", "data-kind": c.kind }, `Falls back (${why}): ${c.text}`));
    }
  }
}

function pinBody() {
  if (!current) throw new Error("preview a resource first");
  return current.template
    ? { server: current.server, template: current.template, arguments: current.arguments }
    : { server: current.server, uri: current.uri };
}

async function attachTo(path, what) {
  const pin = await api("POST", path, pinBody());
  $("attach-status").textContent = `attached to ${what} (pin ${pin.id})`;
  await loadPins(true);
}

// ---- pipelines, turns ---------------------------------------------------------------

async function loadPipelines() {
  ({ pipelines } = await api("GET", "/v1/pipelines"));
  for (const select of [$("pipeline-id"), $("turn-pipeline"), $("tool-pipeline")]) {
    select.replaceChildren(...pipelines.map((p) => el("option", { value: p.id }, `${p.id} (${p.runner})`)));
  }
}

async function runTurn() {
  const body = { pipeline: $("turn-pipeline").value, message: $("turn-message").value };
  const conversation = $("turn-conversation").value.trim();
  if (conversation) body.conversation_id = conversation;
  if ($("turn-runner").value) body.runner = $("turn-runner").value;
  const reply = $("turn-reply");
  reply.hidden = true;
  $("turn-status").textContent = "running… (answer any question above)";
  let doc;
  try {
    doc = await whileWaiting(() => api("POST", "/v1/turns", body));
  } finally {
    $("turn-status").textContent = "";
  }
  reply.hidden = false;
  reply.textContent = doc.reply;
  $("turn-status").textContent = `turn ${doc.turn_id}${doc.failed ? " failed" : ""}`;
  await loadHistory(true);
}

// ---- pins ---------------------------------------------------------------------------

function pinTarget(p) {
  if (p.uri) return p.uri;
  const args = Object.entries(p.arguments || {})
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : `{${v.var}}`}`)
    .join(", ");
  return `${p.template} (${args})`;
}

async function loadPins(fresh) {
  if (fresh) pinsOffset = 0;
  const params = new URLSearchParams({ limit: "100", offset: String(pinsOffset) });
  if ($("pins-scope").value) params.set("scope", $("pins-scope").value);
  const { pins, next_offset } = await api("GET", `/v1/pins?${params}`);
  const tbody = $("pins").tBodies[0];
  if (fresh) tbody.replaceChildren();
  for (const p of pins) {
    const remove = el("button", { "data-remove-pin": p.id, onclick: () => guarded(() => removePin(p)) }, "Remove");
    const cells = [p.scope, p.owner, p.server, pinTarget(p), time(p.created_at_ms), p.expires_at_ms ? time(p.expires_at_ms) : "never"];
    tbody.append(el("tr", { "data-pin": p.id }, ...cells.map((c) => el("td", {}, c)), el("td", {}, remove)));
  }
  pinsOffset = next_offset ?? pinsOffset;
  $("pins-more").hidden = next_offset == null;
  $("pins-none").hidden = tbody.rows.length > 0;
}

async function removePin(p) {
  const owners = p.scope === "pipeline" ? "pipelines" : "conversations";
  await api("DELETE", `/v1/${owners}/${encodeURIComponent(p.owner)}/attachments/${encodeURIComponent(p.id)}`);
  await loadPins(true);
}

// ---- questions of running turns -----------------------------------------------------

// Runs `f` (a turn or a tool call started here), polling the questions every second
// until it ends.
async function whileWaiting(f) {
  waiting += 1;
  const timer = setInterval(pollQuestions, 1000);
  pollQuestions();
  try {
    return await f();
  } finally {
    waiting -= 1;
    clearInterval(timer);
    pollQuestions();
  }
}

// loadQuestions for the timers: its error goes to the section, leaving the page's
// banner to the operator's own actions.
async function pollQuestions() {
  try {
    await loadQuestions();
    $("questions-error").textContent = "";
  } catch (e) {
    $("questions-error").textContent = e.message;
  }
}

// Adds the cards of new questions and removes those no longer pending; a card already
// shown is left alone (an answer being typed stays).
function syncCards(box, attr, questions, card) {
  const ids = new Set(questions.map((q) => q.id));
  for (const old of [...box.children]) {
    if (!ids.has(old.getAttribute(attr))) old.remove();
  }
  const shown = new Set([...box.children].map((c) => c.getAttribute(attr)));
  for (const q of questions) if (!shown.has(q.id)) box.append(card(q));
}

async function loadQuestions() {
  const [{ consent_requests }, { elicitation_requests }] = await Promise.all([
    api("GET", "/v1/consent-requests"),
    api("GET", "/v1/elicitation-requests"),
  ]);
  syncCards($("consent-requests"), "data-consent-id", consent_requests, consentCard);
  syncCards($("elicitation-requests"), "data-elicitation-id", elicitation_requests, elicitationCard);
  showNone();
}

function showNone() {
  $("questions-none").hidden = $("consent-requests").children.length + $("elicitation-requests").children.length > 0;
}

function facts(q) {
  const parts = [`pipeline ${q.pipeline}`];
  if (q.conversation) parts.push(`conversation ${q.conversation}`);
  if (q.sender) parts.push(`sender ${q.sender}`);
  parts.push(`asked ${time(q.asked_at_ms)}`);
  return el("p", { class: "muted" }, parts.join(" · "));
}

function consentCard(q) {
  const card = el("div", { class: "card", "data-consent-id": q.id });
  const what = q.tool
    ? el("p", {}, "Call ", el("code", {}, `${q.server} / ${q.tool.name}`), ` by ${q.tool.caller}`)
    : el("p", {}, "Read ", el("code", { "data-consent-uri": q.uri }, q.uri), ` of ${q.server}, chosen by the ${q.origin}`);
  card.append(el("h3", {}, "Consent"), what);
  if (q.tool) card.append(el("pre", {}, typeof q.tool.arguments === "string" ? q.tool.arguments : JSON.stringify(q.tool.arguments, null, 2)));
  card.append(el("p", {}, `Why: ${q.reason}`), facts(q));
  const status = el("p", { class: "error", role: "alert" });
  const answer = (value) => async () => {
    try {
      await api("POST", `/v1/consent-requests/${encodeURIComponent(q.id)}`, { answer: value });
      card.remove();
      showNone();
    } catch (e) {
      status.textContent = e.message;
    }
  };
  const buttons = el("div", { class: "actions" },
    el("button", { "data-answer": "allow_once", onclick: answer("allow_once") }, "Allow once"));
  if (q.conversation) {
    buttons.append(el("button", { "data-answer": "allow_conversation", onclick: answer("allow_conversation") }, "Allow in this conversation"));
  }
  buttons.append(el("button", { "data-answer": "deny", class: "deny", onclick: answer("deny") }, "Deny"));
  card.append(buttons, status);
  return card;
}

// One input of an elicitation form (MCP 2025-11-25 "Requested Schema": flat
// properties of type string, number, integer, boolean, or an array of enum values).
function field(name, prop, required) {
  const label = `${prop.title || name}${required ? " *" : ""}`;
  const help = prop.description ? el("span", { class: "muted" }, ` ${prop.description}`) : "";
  const options = prop.oneOf || prop.anyOf;
  if (prop.type === "boolean") {
    const input = el("input", { type: "checkbox", "data-field": name, checked: prop.default === true });
    return { node: el("label", { class: "field" }, input, ` ${label}`, help), value: () => input.checked, set: () => true };
  }
  if (prop.type === "array") {
    const items = prop.items || {};
    const values = items.enum ? items.enum.map((v) => [v, v]) : (items.anyOf || items.oneOf || []).map((o) => [o.const, o.title || o.const]);
    const chosen = Array.isArray(prop.default) ? prop.default : [];
    const boxes = values.map(([v]) => [v, el("input", { type: "checkbox", "data-field": name, value: v, checked: chosen.includes(v) })]);
    const node = el("fieldset", { class: "field" }, el("legend", {}, label), help);
    for (const [i, [, t]] of values.entries()) node.append(el("label", {}, boxes[i][1], ` ${t}`));
    const value = () => boxes.filter(([, b]) => b.checked).map(([v]) => v);
    return { node, value, set: () => value().length > 0 };
  }
  if (prop.enum || options) {
    const values = prop.enum ? prop.enum.map((v, i) => [v, (prop.enumNames && prop.enumNames[i]) || v]) : options.map((o) => [o.const, o.title || o.const]);
    const select = el("select", { "data-field": name }, el("option", { value: "" }, "—"), ...values.map(([v, t]) => el("option", { value: v }, t)));
    if (prop.default !== undefined) select.value = prop.default;
    return { node: el("label", { class: "field" }, `${label} `, select, help), value: () => select.value, set: () => select.value !== "" };
  }
  const numeric = prop.type === "number" || prop.type === "integer";
  const types = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
  const input = el("input", { "data-field": name, type: numeric ? "number" : types[prop.format] || "text" });
  if (prop.default !== undefined) input.value = prop.default;
  const value = () => (numeric ? Number(input.value) : input.value);
  return { node: el("label", { class: "field" }, `${label} `, input, help), value, set: () => input.value !== "" };
}

function elicitationCard(q) {
  const card = el("div", { class: "card", "data-elicitation-id": q.id });
  card.append(el("h3", {}, `Question from ${q.server}`), el("blockquote", { "data-message": "" }, q.message), facts(q));
  const fields = [];
  if (q.mode === "url") {
    // The URL is shown, never opened or linked: the operator looks at the domain first.
    card.append(el("p", {}, "It asks to open a page on ", el("strong", { "data-domain": "" }, q.domain), ":"), el("pre", {}, q.url));
  } else {
    const schema = q.requested_schema || {};
    const required = schema.required || [];
    // Required fields first, the others in the server's order.
    const entries = Object.entries(schema.properties || {});
    entries.sort(([a], [b]) => Number(required.includes(b)) - Number(required.includes(a)));
    for (const [name, prop] of entries) {
      const f = field(name, prop, required.includes(name));
      fields.push([name, f]);
      card.append(f.node);
    }
  }
  const status = el("p", { class: "error", role: "alert" });
  const answer = (action) => async () => {
    const body = { action };
    if (action === "accept" && q.mode !== "url") {
      body.content = {};
      for (const [name, f] of fields) if (f.set()) body.content[name] = f.value();
    }
    try {
      await api("POST", `/v1/elicitation-requests/${encodeURIComponent(q.id)}`, body);
      card.remove();
      showNone();
    } catch (e) {
      // `invalid_content` names the field; the question stays pending.
      status.textContent = e.message;
    }
  };
  card.append(el("div", { class: "actions" },
    el("button", { "data-action": "accept", onclick: answer("accept") }, q.mode === "url" ? "I opened it" : "Accept"),
    el("button", { "data-action": "decline", class: "deny", onclick: answer("decline") }, "Decline"),
    el("button", { "data-action": "cancel", onclick: answer("cancel") }, "Cancel")), status);
  return card;
}

// ---- history ------------------------------------------------------------------------

// As `hostpipe history` labels it (runners/src/render.rs, treatment_label).
function treatmentLabel(t, tokensAfter) {
  switch (t.kind) {
    case "whole": return "whole";
    case "truncated": return `${t.side === "head_tail" ? "head+tail" : t.side} kept, ${t.omitted_tokens} cut`;
    case "chunked": return `chunked ${t.kept}/${t.total}`;
    case "summarized": return "summarized";
    case "omitted": return tokensAfter === 0 ? "left out" : "fallback";
    default: return t.kind;
  }
}

async function loadHistory(fresh) {
  if (fresh) historyOffset = 0;
  const params = new URLSearchParams({ limit: "50", offset: String(historyOffset) });
  const conversation = $("history-conversation").value.trim();
  if (conversation) params.set("conversation", conversation);
  if ($("history-errors").checked) params.set("errors", "true");
  const { records, next_offset } = await api("GET", `/v1/history?${params}`);
  const tbody = $("history").tBodies[0];
  if (fresh) tbody.replaceChildren();
  for (const r of records) {
    const read = r; // the read's fields are inline
    const tokens = `${read.tokens_estimated ? "~" : ""}${read.tokens_before} → ${read.tokens_after}`;
    const cells = [
      time(r.at_ms),
      r.conversation || "-",
      r.pipeline,
      read.server,
      read.uri,
      // A model's read is of no attachment scope.
      read.origin === "model" ? "-" : read.scope,
      read.origin,
      tokens,
      treatmentLabel(read.treatment, read.tokens_after),
      read.consent || "",
      read.error || "",
    ];
    const tr = el("tr", { class: read.error ? "error" : "", "data-uri": read.uri }, ...cells.map((c) => el("td", {}, c)));
    tbody.append(tr);
  }
  historyOffset = next_offset ?? historyOffset;
  $("history-more").hidden = next_offset == null;
  await loadToolCalls(fresh);
}

// The tool calls of the same turns, with the same filters.
async function loadToolCalls(fresh) {
  if (fresh) callsOffset = 0;
  const params = new URLSearchParams({ limit: "50", offset: String(callsOffset) });
  const conversation = $("history-conversation").value.trim();
  if (conversation) params.set("conversation", conversation);
  if ($("history-errors").checked) params.set("errors", "true");
  const { calls, next_offset } = await api("GET", `/v1/history/tool-calls?${params}`);
  const tbody = $("tool-calls").tBodies[0];
  if (fresh) tbody.replaceChildren();
  for (const c of calls) {
    let args = JSON.stringify(c.arguments);
    if (args.length > 80) args = args.slice(0, 77) + "…";
    const cells = [
      time(c.at_ms),
      c.conversation || "-",
      c.pipeline,
      c.server,
      c.tool,
      c.origin,
      args,
      String(c.result_tokens),
      c.consent || "",
      c.error || (c.is_error ? "the tool reported an error" : ""),
    ];
    const tr = el("tr", { class: c.is_error ? "error" : "", "data-tool": c.tool }, ...cells.map((x) => el("td", {}, x)));
    tbody.append(tr);
  }
  callsOffset = next_offset ?? callsOffset;
  $("tool-calls-more").hidden = next_offset == null;
}

// ---- start --------------------------------------------------------------------------

async function start() {
  await loadServers();
  await loadPipelines();
  await Promise.all([loadHistory(true), loadPins(true), loadQuestions()]);
  $("main").hidden = false;
  $("login-status").textContent = "connected";
  if (!start.polling) {
    start.polling = setInterval(() => {
      if (waiting === 0 && !document.hidden) pollQuestions();
    }, 5000);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("token").value = token;
  $("login").onsubmit = (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem("hostpipe-token", token);
    guarded(start);
  };
  $("attach-conversation").onsubmit = (ev) => {
    ev.preventDefault();
    const id = $("conversation-id").value.trim();
    guarded(() => attachTo(`/v1/conversations/${encodeURIComponent(id)}/attachments`, `conversation ${id}`));
  };
  $("pin-pipeline").onsubmit = (ev) => {
    ev.preventDefault();
    const id = $("pipeline-id").value;
    guarded(() => attachTo(`/v1/pipelines/${encodeURIComponent(id)}/attachments`, `pipeline ${id}`));
  };
  $("turn-form").onsubmit = (ev) => {
    ev.preventDefault();
    guarded(runTurn);
  };
  $("history-form").onsubmit = (ev) => {
    ev.preventDefault();
    guarded(() => loadHistory(true));
  };
  $("pins-form").onsubmit = (ev) => {
    ev.preventDefault();
    guarded(() => loadPins(true));
  };
  $("pins-more").onclick = () => guarded(() => loadPins(false));
  $("questions-refresh").onclick = () => pollQuestions();
  $("history-more").onclick = () => guarded(() => loadHistory(false));
  $("tool-calls-more").onclick = () => guarded(() => loadToolCalls(false));
  if (token) guarded(start);
});
