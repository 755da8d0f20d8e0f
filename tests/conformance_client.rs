//! The client under test for the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, pinned in `tests/package.json`).
//!
//! The suite starts a scenario's test server and runs `sh -c "<command> <url>"`: the
//! server URL is the last argument and the scenario name is in
//! `MCP_CONFORMANCE_SCENARIO`. This binary connects to the URL through hostpipe's own
//! MCP host ([`hostpipe_mcp::McpHost`], streamable HTTP), does what the scenario asks,
//! shuts the host down and exits: 0 when the scenario's steps succeeded, 1 with the
//! reason on stderr otherwise, 2 for bad usage. What it did goes to stderr; rmcp's and
//! hostpipe's logs too, filtered by `HOSTPIPE_LOG` (default `warn`: rmcp's warnings,
//! e.g. about a server's odd answer, are worth seeing here).
//!
//! Scenarios (the suite's `list`; each revision's are run with `--spec-version`, which
//! sets `MCP_CONFORMANCE_PROTOCOL_VERSION`):
//! - `initialize`, `json-schema-ref-no-deref`: connect (which lists tools, resources and
//!   prompts) and exit; the second checks that listing never fetches a network `$ref`;
//! - `tools_call`: connect, call `add_numbers` with `{"a": 5, "b": 3}` and check the
//!   text `The sum of 5 and 3 is 8`;
//! - `sse-retry`: connect, call `test_reconnection`, whose response stream the server
//!   closes before the result; the result must arrive on the resumed stream;
//! - `json-schema-2020-12-preservation`: call `json_schema_echo` with the input schema
//!   hostpipe listed for `json_schema_2020_12_tool`, which the suite diffs against its
//!   own (SEP-1613, SEP-2106);
//! - `request-metadata`, `http-standard-headers`, `http-custom-headers`,
//!   `http-invalid-tool-headers`: call the tools the suite's context names
//!   (`MCP_CONFORMANCE_CONTEXT`, `toolCalls`), or else every listed tool with arguments
//!   built from its schema's required properties, then read the first listed resource
//!   and get the first listed prompt; the suite checks what went on the wire (`_meta`,
//!   `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`; SEP-2575,
//!   SEP-2243), and that the tools with invalid `x-mcp-header` annotations were never
//!   listed, so never called;
//! - `elicitation-sep1034-client-defaults` (2025-11-25, `elicitation/create`) and
//!   `sep-2322-client-request-state` (2026-07-28, `input_required` rounds): call every
//!   listed tool in a turn's elicitation scope whose user accepts every form leaving
//!   its fields empty, so that hostpipe fills in the form's defaults (SEP-1034); a
//!   required field without one gets a value of its type. The suite checks the content
//!   it got, and that each retry echoes `requestState` with a new request id;
//! - `auth/*`: the server gets an `auth` through hostpipe's own config types (a client ID
//!   metadata document, the context's pre-registered client, or client credentials);
//!   when it is `needs_login`, the client logs in through [`McpHost::start_login`]
//!   (the authorization URL fetched without following the redirect, its `Location`
//!   given to `PendingLogin::finish`) and reconnects; then it calls every tool, logging
//!   in again on `insufficient_scope` (at most [`MAX_LOGINS`] logins).
//!
//! Every network step is bounded: the connect and each request by [`TIMEOUT`], the
//! shutdown by [`SHUTDOWN_TIMEOUT`].

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::sync::Arc;

use anyhow::{Context as _, bail, ensure};
use async_trait::async_trait;
use hostpipe_core::{
    ElicitScope, ElicitationAnswer, ElicitationMode, ElicitationRequest, ElicitationSettings,
    Elicitor, McpSource as _, ServerStatus, ToolContent, Turn,
};
use hostpipe_mcp::{Elicitation, HostOptions, McpHost, ProtocolMode, ServerConfig};

/// The connect (HTTP plus `initialize`) and each request. The suite's own default
/// timeout for a client run is 30 s.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Closing the session.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// The name the server has in the host.
const SERVER: &str = "conformance";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOSTPIPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: MCP_CONFORMANCE_SCENARIO=NAME conformance-client URL");
        return ExitCode::from(2);
    };
    let Ok(scenario) = std::env::var("MCP_CONFORMANCE_SCENARIO") else {
        eprintln!("conformance-client: MCP_CONFORMANCE_SCENARIO is not set");
        return ExitCode::from(2);
    };
    eprintln!("conformance-client: scenario `{scenario}`, server {url}");

    let options = HostOptions {
        connect_timeout: TIMEOUT,
        request_timeout: TIMEOUT,
        // One session, no background traffic: the suite's servers count requests.
        ping_interval: Duration::ZERO,
        max_reconnect_attempts: Some(0),
        // Declared for every scenario (SEP-2575 checks it is well formed); asked only
        // in the elicitation ones, which run in a turn's scope.
        elicitation: Elicitation::Form,
        ..HostOptions::default()
    };
    // The suite names the revision a scenario is for (`--spec-version`); without one, its
    // scenarios are 2025-11-25's, whose servers expect `initialize` first, not the probe.
    let mut server = ServerConfig::http(SERVER, url);
    if scenario.starts_with("auth/") {
        match auth_config(&scenario) {
            Ok(auth) => {
                if let hostpipe_mcp::TransportConfig::StreamableHttp { auth: a, .. } =
                    &mut server.transport
                {
                    *a = auth;
                }
            }
            Err(e) => {
                eprintln!("conformance-client: {e:#}");
                return ExitCode::from(2);
            }
        }
    }
    server.protocol = match std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").as_deref() {
        Ok("2026-07-28") => ProtocolMode::Modern,
        _ => ProtocolMode::Legacy,
    };
    let host = McpHost::new([server], options);
    let started = Instant::now();
    let outcome = run(&host, &scenario).await;
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, host.shutdown())
        .await
        .is_err()
    {
        eprintln!(
            "conformance-client: the host did not shut down within {} ms",
            SHUTDOWN_TIMEOUT.as_millis()
        );
    }
    match outcome {
        Ok(()) => {
            eprintln!(
                "conformance-client: scenario `{scenario}` done in {} ms",
                started.elapsed().as_millis()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("conformance-client: scenario `{scenario}` failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What the suite passes in `MCP_CONFORMANCE_CONTEXT` (JSON) for the scenarios used here.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Context {
    /// The tool calls the scenario wants, in order.
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    /// `auth/pre-registration`, `auth/client-credentials-basic`: the client registered
    /// with the mock authorization server.
    #[serde(default, alias = "client_id")]
    client_id: Option<String>,
    /// Its secret.
    #[serde(default, alias = "client_secret")]
    client_secret: Option<String>,
}

/// The client ID metadata document URL the suite's `auth/basic-cimd` expects.
const CIMD_URL: &str = "https://conformance-test.local/client-metadata.json";
/// The redirect URI of the logins (the mock authorization server redirects at once, and
/// the client reads the `Location` instead of following it).
const REDIRECT_URI: &str = "http://localhost:3000/callback";

/// The server's `auth` for an `auth/*` scenario, through hostpipe's own config types:
/// client credentials for the extension scenario, the context's pre-registered client,
/// else a client ID metadata document (with dynamic registration as the fallback).
fn auth_config(scenario: &str) -> anyhow::Result<hostpipe_mcp::auth_config::AuthConfig> {
    use hostpipe_mcp::auth_config::{AuthConfig, ClientCredentials, OAuthClient, Secret};
    let context = context()?;
    if scenario == "auth/client-credentials-basic" {
        return Ok(AuthConfig::ClientCredentials(ClientCredentials {
            client_id: context.client_id.context("the context has no client_id")?,
            client_secret: Secret::new(
                context
                    .client_secret
                    .context("the context has no client_secret")?,
            ),
            scopes: Vec::new(),
        }));
    }
    Ok(AuthConfig::OAuth(OAuthClient {
        client_metadata_url: Some(CIMD_URL.to_owned()),
        client_name: Some("hostpipe-conformance-client".to_owned()),
        client_secret: context.client_secret.clone().map(Secret::new),
        client_id: context.client_id,
        ..OAuthClient::default()
    }))
}

/// Most logins an `auth/*` scenario may take (the first, a step-up, a migration): a
/// server that keeps asking is not logged in to forever (`auth/scope-retry-limit`).
const MAX_LOGINS: usize = 3;

/// An `auth/*` scenario: connect; a `needs_login` server logs in through the host's own
/// login (`McpHost::start_login`, the authorization URL fetched without following the
/// redirect, whose `Location` is the callback) and reconnects; then every tool is
/// called, and a call refused for `insufficient_scope` logs in again (the host asks for
/// the union of scopes) and is retried.
async fn run_auth(host: &McpHost) -> anyhow::Result<()> {
    host.connect_all().await;
    let mut logins = 0;
    loop {
        let status = status(host)?;
        if status.needs_login() {
            ensure!(
                logins < MAX_LOGINS,
                "still {} after {logins} logins",
                status.describe()
            );
            eprintln!("conformance-client: {}; logging in", status.describe());
            login(host).await?;
            logins += 1;
            continue;
        }
        if let ServerStatus::Failed { reason } = &status {
            bail!("connect failed: {reason}");
        }
        ensure!(
            status.is_connected(),
            "not connected: {}",
            status.describe()
        );
        break;
    }
    eprintln!("conformance-client: connected");
    for tool in host.list_tools(SERVER).await?.iter() {
        let arguments = required_arguments(&tool.input_schema);
        let mut attempt = call_result(host, &tool.name, arguments.clone()).await;
        // A test client may read the message: the host keeps the challenge for the login.
        while let Err(e) = &attempt {
            let step_up = format!("{e:#}").contains("insufficient_scope");
            if !step_up || logins >= MAX_LOGINS {
                break;
            }
            eprintln!("conformance-client: {e:#}; logging in again for more scope");
            login(host).await?;
            logins += 1;
            attempt = call_result(host, &tool.name, arguments.clone()).await;
        }
        attempt?;
    }
    Ok(())
}

/// One login through the host, then a reconnect.
async fn login(host: &McpHost) -> anyhow::Result<()> {
    let login = host.start_login(SERVER, REDIRECT_URI).await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .build()?;
    let answer = http.get(login.authorization_url()).send().await?;
    let location = answer
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .with_context(|| {
            format!(
                "the authorization endpoint answered {} without a Location",
                answer.status()
            )
        })?
        .to_owned();
    login.finish(&location).await?;
    let status = host.reconnect(SERVER).await?;
    eprintln!("conformance-client: after the login: {}", status.describe());
    Ok(())
}

fn status(host: &McpHost) -> anyhow::Result<ServerStatus> {
    Ok(host
        .servers()
        .into_iter()
        .find(|s| s.name == SERVER)
        .context("the server is not in the host")?
        .status)
}

#[derive(Debug, serde::Deserialize)]
struct ToolCall {
    name: String,
    #[serde(default)]
    arguments: serde_json::Map<String, serde_json::Value>,
}

fn context() -> anyhow::Result<Context> {
    match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(json) => {
            serde_json::from_str(&json).context("MCP_CONFORMANCE_CONTEXT is not the expected JSON")
        }
        Err(_) => Ok(Context::default()),
    }
}

async fn run(host: &McpHost, scenario: &str) -> anyhow::Result<()> {
    const KNOWN: &[&str] = &[
        "initialize",
        "json-schema-ref-no-deref",
        "tools_call",
        "sse-retry",
        "json-schema-2020-12-preservation",
        "request-metadata",
        "http-standard-headers",
        "http-custom-headers",
        "http-invalid-tool-headers",
        "elicitation-sep1034-client-defaults",
        "sep-2322-client-request-state",
    ];
    if scenario.starts_with("auth/") {
        return run_auth(host).await;
    }
    if !KNOWN.contains(&scenario) {
        bail!("unknown scenario (known: {}, auth/*)", KNOWN.join(", "));
    }
    let context = context()?;
    connect(host).await?;
    match scenario {
        "tools_call" => {
            let text = call(host, "add_numbers", serde_json::json!({"a": 5, "b": 3})).await?;
            ensure!(
                text == "The sum of 5 and 3 is 8",
                "add_numbers answered {text:?}, expected \"The sum of 5 and 3 is 8\""
            );
        }
        "sse-retry" => {
            // The server closes this call's SSE stream after a priming event; the
            // result comes on the GET stream the client resumes with `Last-Event-ID`.
            let started = Instant::now();
            call(host, "test_reconnection", serde_json::json!({})).await?;
            eprintln!(
                "conformance-client: test_reconnection answered after {} ms",
                started.elapsed().as_millis()
            );
        }
        "json-schema-2020-12-preservation" => {
            let tools = host.list_tools(SERVER).await?;
            let focal = tools
                .iter()
                .find(|t| t.name == "json_schema_2020_12_tool")
                .context("`json_schema_2020_12_tool` is not listed")?;
            let schema = focal.input_schema.clone();
            call(
                host,
                "json_schema_echo",
                serde_json::json!({ "schema": schema }),
            )
            .await?;
        }
        "request-metadata"
        | "http-standard-headers"
        | "http-custom-headers"
        | "http-invalid-tool-headers" => exercise(host, &context).await?,
        "elicitation-sep1034-client-defaults" | "sep-2322-client-request-state" => {
            let mut turn = Turn::new("conformance", "");
            turn.ids.conversation = Some("conformance".into());
            let scope = ElicitScope::new(Arc::new(Accepts), &turn, ElicitationSettings::default());
            scope
                .run(async {
                    for tool in host.list_tools(SERVER).await?.iter() {
                        let arguments = required_arguments(&tool.input_schema);
                        call_result(host, &tool.name, arguments).await?;
                    }
                    anyhow::Ok(())
                })
                .await?;
        }
        _ => {}
    }
    Ok(())
}

/// A user who accepts every form as offered: its fields left empty (hostpipe fills in
/// their defaults), a required one without a default answered with a value of its type.
struct Accepts;

#[async_trait]
impl Elicitor for Accepts {
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer {
        let ElicitationMode::Form { requested_schema } = &request.mode else {
            return ElicitationAnswer::Decline;
        };
        eprintln!(
            "conformance-client: elicitation from {}: {}",
            request.server, request.message
        );
        let mut schema = requested_schema.clone();
        // Only the fields without a default: hostpipe applies the rest.
        if let Some(properties) = schema["properties"].as_object_mut() {
            properties.retain(|_, p| p.get("default").is_none());
        }
        ElicitationAnswer::Accept {
            content: required_arguments(&schema),
        }
    }
}

/// Calls the context's tools (or every listed tool), reads the first listed resource
/// and gets the first listed prompt, so that each kind of request goes on the wire.
async fn exercise(host: &McpHost, context: &Context) -> anyhow::Result<()> {
    if context.tool_calls.is_empty() {
        for tool in host.list_tools(SERVER).await?.iter() {
            let arguments = required_arguments(&tool.input_schema);
            call_result(host, &tool.name, arguments).await?;
        }
    } else {
        for c in &context.tool_calls {
            call_result(host, &c.name, c.arguments.clone()).await?;
        }
    }
    if let Some(resource) = host.list_resources(SERVER).await?.first() {
        let read = host.read_resource(SERVER, &resource.uri).await?;
        eprintln!(
            "conformance-client: read {} ({} contents)",
            resource.uri,
            read.contents.len()
        );
    }
    if let Some(prompt) = host.list_prompts(SERVER).await?.first() {
        let arguments = prompt
            .arguments
            .iter()
            .filter(|a| a.required)
            .map(|a| (a.name.clone(), "test".to_owned()))
            .collect();
        let got = host.get_prompt(SERVER, &prompt.name, &arguments).await?;
        eprintln!(
            "conformance-client: got prompt {} ({} messages)",
            prompt.name,
            got.messages.len()
        );
    }
    Ok(())
}

/// Arguments for a tool with only its schema to go by: each required property gets a
/// value of its type (the rust-sdk conformance client's rule).
fn required_arguments(schema: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return serde_json::Map::new();
    };
    properties
        .iter()
        .filter(|(name, _)| required.contains(&name.as_str()))
        .map(|(name, property)| {
            let value = match property["type"].as_str() {
                Some("number") => serde_json::json!(1.0),
                Some("integer") => serde_json::json!(1),
                Some("boolean") => serde_json::json!(true),
                Some("string") => serde_json::json!("test"),
                _ => serde_json::Value::Null,
            };
            (name.clone(), value)
        })
        .collect()
}

/// Calls `tool` and reports the outcome; an error result is fine here (the suite
/// looks at the request, not the answer), a failed request is not.
async fn call_result(
    host: &McpHost,
    tool: &str,
    arguments: serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let result = host
        .call_tool(SERVER, tool, Some(arguments))
        .await
        .with_context(|| format!("calling `{tool}`"))?;
    eprintln!(
        "conformance-client: {tool} answered{}",
        if result.is_error {
            " with an error result"
        } else {
            ""
        }
    );
    Ok(())
}

/// Connects (which also lists what the server declares) and checks the outcome.
async fn connect(host: &McpHost) -> anyhow::Result<()> {
    host.connect_all().await;
    let info = host
        .servers()
        .into_iter()
        .find(|s| s.name == SERVER)
        .context("the server is not in the host")?;
    if let ServerStatus::Failed { reason } = &info.status {
        bail!("connect failed: {reason}");
    }
    ensure!(
        info.status.is_connected(),
        "not connected: {}",
        info.status.describe()
    );
    eprintln!(
        "conformance-client: connected; protocol version {}, server {}, tools {}",
        info.protocol_version.as_deref().unwrap_or("?"),
        info.implementation
            .as_ref()
            .map_or_else(|| "?".to_owned(), |(n, v)| format!("{n} {v}")),
        info.counts.tools,
    );
    for w in &info.warnings {
        eprintln!("conformance-client: warning: {w}");
    }
    Ok(())
}

/// Calls `tool` (which must be listed) and returns its text content.
async fn call(host: &McpHost, tool: &str, arguments: serde_json::Value) -> anyhow::Result<String> {
    let tools = host.list_tools(SERVER).await?;
    ensure!(
        tools.iter().any(|t| t.name == tool),
        "tool `{tool}` is not listed (tools: {:?})",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let serde_json::Value::Object(arguments) = arguments else {
        bail!("tool arguments must be a JSON object");
    };
    eprintln!("conformance-client: calling {tool} {arguments:?}");
    let result = host.call_tool(SERVER, tool, Some(arguments)).await?;
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| match c {
            ToolContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let text = text.join("\n");
    ensure!(!result.is_error, "{tool} reported an error: {text}");
    eprintln!("conformance-client: {tool} answered {text:?}");
    Ok(text)
}
