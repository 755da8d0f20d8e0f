//! The gateway: the resources, resource templates and prompts of the servers a pipeline
//! binds, as one MCP server's.
//!
//! Names and URIs are namespaced by server:
//! - a resource `URI` of server `S` is `hostpipe://S/URI` ([`namespaced_uri`]; `S`
//!   percent-encoded unless it is all RFC 3986 unreserved characters), the original URI
//!   verbatim after the first `/`, so an RFC 6570 template `T` stays a valid template
//!   as `hostpipe://S/T`, and what a client expands from it reads `URI` of `S`;
//! - a resource or template named `n` is `S__n`; a prompt `n` is offered as the
//!   tool-assembly stage names tools (`S__n`, sanitized to `[a-zA-Z0-9_-]`, at most 64
//!   characters, a short hash when longer or taken: [`namespaced_name`]).
//!
//! What is listed and read follows the pipeline's policy, as for the model's
//! `list_resources` and `read_resource` tools: only the servers the pipeline binds (and
//! that are connected) are listed; resources for the user only
//! (`annotations.audience: ["user"]`) and those a consent rule denies to model reads
//! are left out of the listing; every read is a model read through the pipeline's
//! executor ([`Pipeline::read_for_caller`]): bound server, audience, MIME type and size,
//! consent gate, byte and MIME limits on what came back. A read the policy withholds is
//! an error that says so (never the content, never "not found"). `prompts/get` goes to
//! the server as `POST /v1/servers/{server}/prompts/{name}` does. The servers' tools are
//! not proxied: `fit_context` is the door's one tool.

use std::collections::BTreeMap;

use base64::Engine as _;
use hostpipe_core::{
    CallOrigin, CallerRead, ConsentGate as _, McpSource as _, ReadOrigin, ResourceContents,
    SourceError, ToolError, Turn,
};
use hostpipe_engine::Pipeline;
use hostpipe_stages::namespaced_name;
use rmcp::ErrorData;
use rmcp::model::{
    Annotations, GetPromptResult, JsonObject, Prompt, PromptArgument, ReadResourceResult, Resource,
    ResourceTemplate, Role,
};

use crate::serve::ServeState;

/// The scheme of the gateway's URIs.
pub(super) const SCHEME: &str = "hostpipe://";

/// Whether `b` is an RFC 3986 §2.3 unreserved character.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `hostpipe://SERVER/URI`, `SERVER` percent-encoded (RFC 3986 §2.1) but for unreserved
/// characters.
pub(super) fn namespaced_uri(server: &str, uri: &str) -> String {
    let mut out = String::with_capacity(SCHEME.len() + server.len() + 1 + uri.len());
    out.push_str(SCHEME);
    for b in server.bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push('/');
    out.push_str(uri);
    out
}

/// The server (decoded) and original URI of a gateway URI; `None` when `uri` is not one.
pub(super) fn split_uri(uri: &str) -> Option<(String, &str)> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (server, original) = rest.split_once('/')?;
    let server = super::percent_decode(server)?;
    (!server.is_empty() && !original.is_empty()).then_some((server, original))
}

/// A turn for the stages to bind servers in (no message: nothing is injected), bounded
/// by `[serve] request_timeout_ms`.
fn gateway_turn(state: &ServeState, p: &Pipeline) -> Turn {
    let mut turn = Turn::new(p.id(), "");
    turn.ids.message = format!("mcp-{}", uuid::Uuid::new_v4());
    turn.deadline = Some(std::time::Instant::now() + state.options.request_timeout);
    turn
}

/// Whether `p` has the stage whose executor holds its read policy (`tool_assembly`):
/// without it the gateway lists and reads nothing of `p`.
fn has_executor(p: &Pipeline) -> bool {
    p.stage_names()
        .any(|n| n == hostpipe_stages::ToolAssembly::NAME)
}

/// The connected servers `p` binds, in binding order; none when `p` has no
/// `tool_assembly` stage (nothing could be read).
async fn bound(state: &ServeState, p: &Pipeline) -> Result<Vec<String>, ErrorData> {
    if !has_executor(p) {
        return Ok(Vec::new());
    }
    let servers = p
        .bound_servers(gateway_turn(state, p))
        .await
        .map_err(|outcome| ended(p, &outcome))?;
    Ok(servers
        .into_iter()
        .filter(|b| b.status.is_connected())
        .map(|b| b.name)
        .collect())
}

/// A stage ended the turn the gateway ran the stages in (a required server down).
fn ended(p: &Pipeline, outcome: &hostpipe_engine::TurnOutcome) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "pipeline `{}`: stage `{}` ended the turn: {}",
            p.id(),
            outcome.ended_by.as_deref().unwrap_or("?"),
            outcome.reply
        ),
        None,
    )
}

/// Whether server `name` declares the capability `has` picks.
fn declares(
    state: &ServeState,
    name: &str,
    has: fn(&hostpipe_core::ServerCapabilities) -> bool,
) -> bool {
    state
        .app
        .host
        .server(name)
        .is_some_and(|s| has(&s.capabilities))
}

/// MCP annotations in rmcp's shape.
fn annotations(a: &hostpipe_core::Annotations) -> Annotations {
    let mut out = Annotations::default();
    if let Some(audience) = &a.audience {
        out = out.with_audience(
            audience
                .iter()
                .map(|r| match r {
                    hostpipe_core::Role::User => Role::User,
                    hostpipe_core::Role::Assistant => Role::Assistant,
                })
                .collect(),
        );
    }
    if let Some(p) = a.priority {
        out = out.with_priority(p);
    }
    out.last_modified.clone_from(&a.last_modified);
    out
}

/// Whether a listing with `a` is for the user only (never offered to the model).
fn user_only(a: Option<&hostpipe_core::Annotations>) -> bool {
    a.is_some_and(hostpipe_core::Annotations::is_user_only)
}

/// `resources/list`: the resources of `p`'s connected bound servers that declare
/// resources, namespaced, without those for the user only or denied to model reads. A
/// server whose listing fails is left out (logged).
pub(super) async fn resources(
    state: &ServeState,
    p: &Pipeline,
) -> Result<Vec<Resource>, ErrorData> {
    let mut out = Vec::new();
    for server in bound(state, p).await? {
        if !declares(state, &server, |c| c.resources) {
            continue;
        }
        let listed = match state.app.host.list_resources(&server).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(target: "hostpipe::mcp", pipeline = p.id(), server, error = %e, "resources of a bound server left out of the gateway's listing");
                continue;
            }
        };
        let denied = |uri: &str| {
            p.consent()
                .is_some_and(|gate| gate.denies(&server, uri, ReadOrigin::Model))
        };
        for r in listed.iter() {
            if user_only(r.annotations.as_ref()) || denied(&r.uri) {
                continue;
            }
            let mut item = Resource::new(
                namespaced_uri(&server, &r.uri),
                format!("{server}__{}", r.name),
            );
            if let Some(t) = &r.title {
                item = item.with_title(t);
            }
            if let Some(d) = &r.description {
                item = item.with_description(d);
            }
            if let Some(m) = &r.mime_type {
                item = item.with_mime_type(m);
            }
            if let Some(s) = r.size {
                item = item.with_size(s);
            }
            if let Some(a) = &r.annotations {
                item = item.with_annotations(annotations(a));
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// `resources/templates/list`: the templates of `p`'s connected bound servers,
/// namespaced, without those for the user only.
pub(super) async fn templates(
    state: &ServeState,
    p: &Pipeline,
) -> Result<Vec<ResourceTemplate>, ErrorData> {
    let mut out = Vec::new();
    for server in bound(state, p).await? {
        if !declares(state, &server, |c| c.resources) {
            continue;
        }
        let listed = match state.app.host.list_resource_templates(&server).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(target: "hostpipe::mcp", pipeline = p.id(), server, error = %e, "templates of a bound server left out of the gateway's listing");
                continue;
            }
        };
        for t in listed.iter() {
            if user_only(t.annotations.as_ref()) {
                continue;
            }
            let mut item = ResourceTemplate::new(
                namespaced_uri(&server, &t.uri_template),
                format!("{server}__{}", t.name),
            );
            if let Some(title) = &t.title {
                item = item.with_title(title);
            }
            if let Some(d) = &t.description {
                item = item.with_description(d);
            }
            if let Some(m) = &t.mime_type {
                item = item.with_mime_type(m);
            }
            if let Some(a) = &t.annotations {
                item = item.with_annotations(annotations(a));
            }
            out.push(item);
        }
    }
    Ok(out)
}

/// `resources/read` of gateway URI `uri` under `p`'s policy (see the module docs); the
/// items' URIs namespaced like the one read.
///
/// # Errors
/// `-32602` for a URI that is not `hostpipe://SERVER/URI` or names a server `p` does
/// not bind; `-32600` for a read the policy withheld (the message says so); the
/// server's not-found as `-32002`; other failures `-32603`.
pub(super) async fn read(
    state: &ServeState,
    p: &Pipeline,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    let Some((server, original)) = split_uri(uri) else {
        return Err(ErrorData::invalid_params(
            format!("`{uri}` is not a hostpipe://SERVER/URI of this gateway"),
            None,
        ));
    };
    // Servers are named case-sensitively; URI parsers may lowercase the host.
    let server = if state.app.host.server(&server).is_some() {
        server
    } else {
        state
            .app
            .host
            .servers()
            .into_iter()
            .map(|s| s.name)
            .find(|n| n.eq_ignore_ascii_case(&server))
            .unwrap_or(server)
    };
    let outcome = p
        .read_for_caller(gateway_turn(state, p), &server, original, CallOrigin::Api)
        .await
        .map_err(|o| ended(p, &o))?;
    match outcome.result {
        Ok(CallerRead::Contents { contents, withheld }) => {
            if !withheld.is_empty() {
                tracing::info!(target: "hostpipe::mcp", pipeline = p.id(), server, uri = original, withheld = withheld.len(), "items of a gateway read withheld by the pipeline's policy");
            }
            Ok(ReadResourceResult::new(
                contents.iter().map(|c| contents_of(&server, c)).collect(),
            ))
        }
        Ok(CallerRead::Withheld { note }) => Err(ErrorData::invalid_request(
            format!("pipeline `{}`'s policy withheld the read: {note}", p.id()),
            Some(serde_json::json!({ "uri": uri, "withheld": true })),
        )),
        Err(ToolError::ServerNotBound { allowed, .. }) => Err(ErrorData::invalid_params(
            format!(
                "pipeline `{}` does not bind server `{server}` (or it is not connected); it binds: {}",
                p.id(),
                if allowed.is_empty() {
                    "(none)".to_owned()
                } else {
                    allowed.join(", ")
                }
            ),
            None,
        )),
        Err(ToolError::Source(e)) => Err(source_error(uri, &e)),
        // The one read a pipeline refuses this way: it has no executor.
        Err(ToolError::NotOffered { .. }) => Err(ErrorData::invalid_request(
            format!(
                "pipeline `{}` has no `{}` stage, whose executor applies its read policy: the gateway reads nothing of it",
                p.id(),
                hostpipe_stages::ToolAssembly::NAME
            ),
            None,
        )),
        Err(e) => Err(ErrorData::invalid_request(
            format!("pipeline `{}` cannot read `{uri}`: {e}", p.id()),
            None,
        )),
    }
}

/// A server's error about `uri`, as the gateway answers it.
fn source_error(uri: &str, e: &SourceError) -> ErrorData {
    match e {
        SourceError::Protocol { .. } if e.is_not_found() => {
            ErrorData::resource_not_found(e.to_string(), Some(serde_json::json!({ "uri": uri })))
        }
        SourceError::UnknownServer { .. } => ErrorData::invalid_params(e.to_string(), None),
        _ => ErrorData::internal_error(e.to_string(), None),
    }
}

/// One read item in rmcp's shape, its URI namespaced; blobs in base64 (RFC 4648).
fn contents_of(server: &str, c: &ResourceContents) -> rmcp::model::ResourceContents {
    let uri = namespaced_uri(server, c.uri());
    let item = match c {
        ResourceContents::Text { text, .. } => rmcp::model::ResourceContents::text(text, uri),
        ResourceContents::Blob { data, .. } => rmcp::model::ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(data),
            uri,
        ),
    };
    match c.mime_type() {
        Some(m) => item.with_mime_type(m),
        // `text(..)` says text/plain; the server did not.
        None => match item {
            rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                rmcp::model::ResourceContents::TextResourceContents {
                    uri,
                    mime_type: None,
                    text,
                    meta: None,
                }
            }
            other => other,
        },
    }
}

/// `prompts/list`: the prompts of `p`'s connected bound servers that declare prompts,
/// each with the server and its own name.
pub(super) async fn prompts(
    state: &ServeState,
    p: &Pipeline,
) -> Result<Vec<(Prompt, (String, String))>, ErrorData> {
    let mut out: Vec<(Prompt, (String, String))> = Vec::new();
    for server in bound(state, p).await? {
        if !declares(state, &server, |c| c.prompts) {
            continue;
        }
        let listed = match state.app.host.list_prompts(&server).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(target: "hostpipe::mcp", pipeline = p.id(), server, error = %e, "prompts of a bound server left out of the gateway's listing");
                continue;
            }
        };
        for prompt in listed.iter() {
            let name = namespaced_name(&server, &prompt.name, &|n| {
                out.iter().any(|(o, _)| o.name == n)
            });
            let arguments: Vec<PromptArgument> = prompt
                .arguments
                .iter()
                .map(|a| {
                    let arg = PromptArgument::new(&a.name).with_required(a.required);
                    match &a.description {
                        Some(d) => arg.with_description(d),
                        None => arg,
                    }
                })
                .collect();
            let mut item = Prompt::new(
                name,
                prompt.description.clone(),
                (!arguments.is_empty()).then_some(arguments),
            );
            item.title.clone_from(&prompt.title);
            out.push((item, (server.clone(), prompt.name.clone())));
        }
    }
    Ok(out)
}

/// `prompts/get` of the gateway's prompt `name` with `arguments` (string values; others
/// are refused), from its server.
pub(super) async fn get_prompt(
    state: &ServeState,
    p: &Pipeline,
    name: &str,
    arguments: Option<JsonObject>,
) -> Result<GetPromptResult, ErrorData> {
    let listed = prompts(state, p).await?;
    let Some((_, (server, own))) = listed.into_iter().find(|(prompt, _)| prompt.name == name)
    else {
        return Err(ErrorData::invalid_params(
            format!("pipeline `{}` offers no prompt `{name}`", p.id()),
            None,
        ));
    };
    let mut args = BTreeMap::new();
    for (k, v) in arguments.unwrap_or_default() {
        match v {
            serde_json::Value::String(s) => {
                args.insert(k, s);
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("prompt argument `{k}` must be a string, not {other}"),
                    None,
                ));
            }
        }
    }
    let result = state
        .app
        .host
        .get_prompt(&server, &own, &args)
        .await
        .map_err(|e| match &e {
            SourceError::Protocol { code: -32602, .. } => {
                ErrorData::invalid_params(e.to_string(), None)
            }
            _ => ErrorData::internal_error(e.to_string(), None),
        })?;
    serde_json::from_value(hostpipe_runners::mcp_json::get_prompt_result(&result)).map_err(|e| {
        ErrorData::internal_error(
            format!("`{server}`'s prompt `{own}` could not be passed on: {e}"),
            None,
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_namespaced_by_server_and_split_back() {
        let uri = namespaced_uri("demo", "demo://config/app.json");
        assert_eq!(uri, "hostpipe://demo/demo://config/app.json");
        assert_eq!(
            split_uri(&uri),
            Some(("demo".to_owned(), "demo://config/app.json"))
        );
        // A template stays a template: the expression is after the server.
        assert_eq!(
            namespaced_uri("demo", "demo://docs/{topic}"),
            "hostpipe://demo/demo://docs/{topic}"
        );
        // A name that is not all unreserved characters is percent-encoded.
        let odd = namespaced_uri("my kb/1", "file:///a b.txt");
        assert_eq!(odd, "hostpipe://my%20kb%2F1/file:///a b.txt");
        assert_eq!(
            split_uri(&odd),
            Some(("my kb/1".to_owned(), "file:///a b.txt"))
        );
        assert_eq!(split_uri("demo://config/app.json"), None);
        assert_eq!(split_uri("hostpipe://demo"), None);
        assert_eq!(split_uri("hostpipe://demo/"), None);
        assert_eq!(split_uri("hostpipe://bad%zz/x"), None);
        assert_eq!(split_uri("hostpipe://bad%+1/x"), None);
    }
}
