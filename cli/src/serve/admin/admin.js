// hostpipe's admin page: plain DOM, no build step. Everything a server or the API sent
// is shown with textContent (never as HTML); images only as data: URLs of the converted
// bytes. The token stays in this tab (sessionStorage).
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("hostpipe-token") || "";
let current = null; // { server, uri } or { server, template, arguments }
let historyOffset = 0;
let callsOffset = 0;

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
  const doc = text ? JSON.parse(text) : null;
  if (!res.ok) {
    const e = doc && doc.error ? doc.error : { code: String(res.status), message: text };
    throw new Error(`${method} ${path}: ${e.message} (${e.code})`);
  }
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
}

// ---- pipelines, turns ---------------------------------------------------------------

async function loadPipelines() {
  const { pipelines } = await api("GET", "/v1/pipelines");
  for (const select of [$("pipeline-id"), $("turn-pipeline")]) {
    select.replaceChildren(...pipelines.map((p) => el("option", { value: p.id }, `${p.id} (${p.runner})`)));
  }
}

async function runTurn() {
  const body = { pipeline: $("turn-pipeline").value, message: $("turn-message").value };
  const conversation = $("turn-conversation").value.trim();
  if (conversation) body.conversation_id = conversation;
  if ($("turn-runner").value) body.runner = $("turn-runner").value;
  const doc = await api("POST", "/v1/turns", body);
  const reply = $("turn-reply");
  reply.hidden = false;
  reply.textContent = doc.reply;
  await loadHistory(true);
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
      new Date(r.at_ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"),
      r.conversation || "-",
      r.pipeline,
      read.server,
      read.uri,
      read.origin === "model" ? "model" : read.scope,
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
      new Date(c.at_ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"),
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
  await loadHistory(true);
  $("main").hidden = false;
  $("login-status").textContent = "connected";
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
  $("history-more").onclick = () => guarded(() => loadHistory(false));
  $("tool-calls-more").onclick = () => guarded(() => loadToolCalls(false));
  if (token) guarded(start);
});
