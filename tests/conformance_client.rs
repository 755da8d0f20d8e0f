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
//! Scenarios:
//! - `initialize`: connect (`initialize`, `notifications/initialized`) and exit;
//! - `tools_call`: connect (which lists the tools), call `add_numbers` with
//!   `{"a": 5, "b": 3}` and check the text `The sum of 5 and 3 is 8`;
//! - `sse-retry`: connect, call `test_reconnection`, whose response stream the server
//!   closes before the result; the result must arrive on the resumed stream.
//!
//! Every network step is bounded: the connect and each request by [`TIMEOUT`], the
//! shutdown by [`SHUTDOWN_TIMEOUT`].

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use hostpipe_core::{McpSource as _, ServerStatus, ToolContent};
use hostpipe_mcp::{HostOptions, McpHost, ProtocolMode, ServerConfig};

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
        ..HostOptions::default()
    };
    // The suite names the revision a scenario is for (`--spec-version`); without one, its
    // scenarios are 2025-11-25's, whose servers expect `initialize` first, not the probe.
    let mut server = ServerConfig::http(SERVER, url);
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

async fn run(host: &McpHost, scenario: &str) -> anyhow::Result<()> {
    if !matches!(scenario, "initialize" | "tools_call" | "sse-retry") {
        bail!("unknown scenario (known: initialize, tools_call, sse-retry)");
    }
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
        _ => {}
    }
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
