//! Tools under the pipeline's policy, against real servers (server-everything,
//! server-filesystem, a Python SDK server, the rmcp demo): no secret reaches a stdio
//! server; `tool_assembly` include and exclude; consent rules and annotation defaults
//! on tool calls; every call audited (trace, `run --json`, history, `history --tools`);
//! tool results fitted into the model's window; the HTTP tool routes through the Python
//! platform client; the remote runner's protocol 2 with a Python agent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hostpipe_core::{CallOrigin, Encoding, Tokenizer, ToolError, Turn};
use hostpipe_tests::openai_api::{ChatCompletions, answer, tool_call};
use hostpipe_tests::{ADMIN_TOKEN, Service, connect, filesystem, python, root};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// In hostpipe's environment, never in a server's.
const SECRET: &str = "sk-e2e-0123456789-must-not-leak";
const OTHER_SECRET: &str = "aws-e2e-secret-must-not-leak";

fn py() -> PathBuf {
    root().join("tests/.venv/bin/python")
}

fn package(name: &str) -> PathBuf {
    root()
        .join("tests/node_modules/@modelcontextprotocol")
        .join(name)
        .join("dist/index.js")
}

/// `[mcp_servers]` for server-everything, the Python content server (with `env` and
/// `inherit_env`), server-filesystem on `dir`, and the rmcp demo.
fn servers(dir: &Path) -> String {
    format!(
        r#"
[mcp_servers.everything]
command = "node"
args = [{everything:?}, "stdio"]

[mcp_servers.content]
command = {py:?}
args = [{content:?}]
env = {{ GIVEN = "given-value" }}
inherit_env = ["PASS_ME"]

[mcp_servers.fs]
command = "node"
args = [{fs:?}, {dir:?}]

[mcp_servers.demo]
command = {hostpipe:?}
args = ["demo-server"]
"#,
        everything = package("server-everything"),
        fs = package("server-filesystem"),
        py = py(),
        content = root().join("tests/servers/content_server.py"),
        dir = dir,
        hostpipe = hostpipe_tests::hostpipe_bin(),
    )
}

/// Pipeline `id`'s policy: everything, content and fs bound (not demo); server
/// everything's `echo`, `trigger-*`, `toggle-*` and `gzip-*` tools left out; `fs`'s
/// `write_*` tools denied.
fn policy(id: &str) -> String {
    format!(
        r#"
[pipelines.{id}.bind_mcp_servers]
servers = ["everything", "content", "fs"]

[pipelines.{id}.tool_assembly]
exclude = ["everything__echo", "everything__trigger-*", "everything__toggle-*", "everything__gzip-*"]

[pipelines.{id}.consent]
rules = [{{ server = "fs", tool = "write_*", call = "deny" }}]
"#
    )
}

/// Every process below `pid`, by pid, with its command line and environment.
fn descendants(pid: u32) -> BTreeMap<u32, (String, Vec<String>)> {
    let mut parent = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        parent.insert(p, ppid);
    }
    let mut found = BTreeMap::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (&child, _) in parent.iter().filter(|&(_, &pp)| pp == p) {
            let read = |f: &str| std::fs::read(format!("/proc/{child}/{f}")).unwrap_or_default();
            let split = |b: Vec<u8>| -> Vec<String> {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            };
            let cmdline = split(read("cmdline")).join(" ");
            found.insert(child, (cmdline, split(read("environ"))));
            frontier.push(child);
        }
    }
    found
}

/// No secret of hostpipe's environment reaches a stdio server (each child's
/// `/proc/PID/environ`, and server-everything's `get-env` called over HTTP); the
/// config's `env` and `inherit_env` do. Then the HTTP tool routes, through the Python
/// platform client with every answer checked against docs/openapi.json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_server_and_tools_answer_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let config = dir.path().join("hostpipe.toml");
    let text = servers(&files)
        + r#"
[pipelines.tools]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "preview"
"# + &policy("tools");
    std::fs::write(&config, text).unwrap();
    let svc = Service::start_with_env(
        &config,
        "memory",
        &[],
        &[
            ("OPENAI_API_KEY", SECRET),
            ("AWS_SECRET_ACCESS_KEY", OTHER_SECRET),
            ("PASS_ME", "passed-through"),
        ],
    )
    .await;

    let children = descendants(svc.pid());
    let servers: Vec<&str> = children.values().map(|(c, _)| c.as_str()).collect();
    for script in [
        "server-everything",
        "content_server.py",
        "server-filesystem",
        "demo-server",
    ] {
        assert!(
            servers.iter().any(|c| c.contains(script)),
            "{script} not among {servers:#?}"
        );
    }
    for (pid, (cmdline, environ)) in &children {
        let all = environ.join("\n");
        for secret in [
            SECRET,
            OTHER_SECRET,
            ADMIN_TOKEN,
            hostpipe_tests::READ_TOKEN,
        ] {
            assert!(!all.contains(secret), "{pid} {cmdline} has a secret: {all}");
        }
        assert!(
            environ.iter().any(|v| v.starts_with("PATH=")),
            "{cmdline}: {all}"
        );
        let names: BTreeSet<&str> = environ
            .iter()
            .filter_map(|v| v.split_once('=').map(|(n, _)| n))
            .collect();
        if cmdline.contains("content_server.py") {
            assert!(environ.contains(&"GIVEN=given-value".to_owned()), "{all}");
            assert!(
                environ.contains(&"PASS_ME=passed-through".to_owned()),
                "{all}"
            );
        } else if !cmdline.contains("node_modules/.bin") {
            assert!(!names.contains("PASS_ME"), "{cmdline}: {all}");
            assert!(!names.contains("GIVEN"), "{cmdline}: {all}");
        }
    }

    // server-everything's get-env, called as an API caller would.
    let res = reqwest::Client::new()
        .post(svc.url("/v1/servers/everything/tools/get-env/call"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"pipeline": "tools"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let doc: Value = res.json().await.unwrap();
    let env: BTreeMap<String, String> =
        serde_json::from_str(doc["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert!(env.contains_key("PATH"), "{env:?}");
    for name in [
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "HOSTPIPE_TOKEN",
        "PASS_ME",
    ] {
        assert!(
            !env.contains_key(name),
            "{name} reached the server: {env:?}"
        );
    }
    assert_eq!(doc["offered_as"], "everything__get-env");
    assert_eq!(doc["call"]["origin"], "api");
    assert_eq!(doc["call"]["withheld"], false);

    // The Python platform client: list, call, refused calls, a prompt, the history.
    let target = files.join("from-python.txt");
    let out = tokio::process::Command::new(py())
        .arg(root().join("tests/clients/platform_client.py"))
        .args([&svc.base, "tools", "tools"])
        .env("HOSTPIPE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("HOSTPIPE_OPENAPI", root().join("docs/openapi.json"))
        .env("FS_TARGET", &target)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["offered"],
        json!({"get-sum": "everything__get-sum", "get-env": "everything__get-env", "echo": null})
    );
    assert_eq!(
        doc["annotations"],
        json!({"read_only": true, "destructive": false})
    );
    assert_eq!(doc["sum"], "The sum of 2 and 3 is 5.");
    assert_eq!(doc["sum_call"]["arguments"], json!({"a": 2, "b": 3}));
    assert_eq!(
        doc["sum_call"]["consent"],
        "allowed by the default for read-only tools"
    );
    assert_eq!(doc["left_out"], "tool_not_offered");
    assert_eq!(doc["write"], "tool_call_withheld");
    assert!(!target.exists(), "the denied write_file ran");
    assert_eq!(doc["unbound"], "server_not_bound");
    assert_eq!(doc["unknown"], "unknown_tool");
    assert_eq!(doc["bad_arguments"], "invalid_arguments");
    assert_eq!(doc["unknown_prompt"], "unknown_prompt");
    assert_eq!(
        doc["prompt"],
        json!({"messages": [{"role": "user", "content": {"type": "text", "text": "What's weather in Paris?"}}]})
    );
    // Newest turn first, refusals too: the unknown tool, the unbound server's, the
    // withheld write, the left-out echo, the sum, get-env.
    assert_eq!(
        doc["history"],
        json!([
            ["no-such-tool", "api", false],
            ["search_docs", "api", true],
            ["write_file", "api", true],
            ["echo", "api", true],
            ["get-sum", "api", false],
            ["get-env", "api", false]
        ])
    );
    assert_eq!(doc["openapi_checked"], 10);
}

/// The new user's cases through `hostpipe run --runner local`: the model calls
/// `fs__write_file` under a deny rule (not written, the model told it was withheld),
/// server-everything's `get-env` with `OPENAI_API_KEY` set (the key is not in the
/// result), a 2 MB tool result (fitted into the window), an unannotated tool (allowed)
/// and a destructive one with no rule (asked; no answer on stdin, so denied). Every
/// call is in `run --json`, the history and `history --tools`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_calls_tools_under_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("a.txt"), "keep me").unwrap();
    let target = files.join("pwned.txt");
    let server = MockServer::start().await;
    let api = ChatCompletions::new(vec![
        tool_call(
            "c1",
            "fs__write_file",
            &json!({"path": target, "content": "pwned"}).to_string(),
        ),
        tool_call("c2", "everything__get-env", "{}"),
        tool_call("c3", "content__export_handbook", "{}"),
        tool_call("c4", "content__archive_notes", "{}"),
        tool_call(
            "c5",
            "fs__move_file",
            &json!({"source": files.join("a.txt"), "destination": files.join("b.txt")}).to_string(),
        ),
        answer("done"),
        // The second turn, run without --json: arguments that are not JSON, then the
        // denied write again.
        tool_call("d0", "fs__write_file", "{not json"),
        tool_call(
            "d1",
            "fs__write_file",
            &json!({"path": target, "content": "again"}).to_string(),
        ),
        answer("done again"),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(api.clone())
        .mount(&server)
        .await;
    let config = dir.path().join("hostpipe.toml");
    let text = format!(
        r#"
[model]
name = "gpt-test"
context_window = 16000
max_output_tokens = 1000

[pipelines.default]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "local"

[pipelines.default.local]
base_url = "{}/v1"
model = "gpt-test"
stream = false
max_tool_result_tokens = 1000000
"#,
        server.uri()
    ) + &servers(&files)
        + &policy("default");
    std::fs::write(&config, text).unwrap();
    let store = format!("sqlite:{}", dir.path().join("h.db").display());
    let hostpipe = |args: &[&str]| {
        let mut cmd = tokio::process::Command::from(hostpipe_tests::hostpipe_command());
        cmd.args(args)
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(&store)
            .env("OPENAI_API_KEY", SECRET)
            .stdin(std::process::Stdio::null());
        cmd
    };
    let out = hostpipe(&["run", "--json", "tidy up the files"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["reply"], "done", "{doc:#}");

    // Not written: the deny rule held, and the destructive move was not made either.
    assert!(!target.exists());
    assert!(files.join("a.txt").exists() && !files.join("b.txt").exists());

    // The same case as text: the reply on stdout, the withheld call on stderr.
    let out = hostpipe(&["run", "write it again"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done again");
    assert!(
        stderr.contains(
            "warning: tool call write_file of `fs` (model): withheld: denied by rules[0] (server fs, tool write_*)"
        ),
        "{stderr}"
    );
    assert!(!target.exists());

    let requests = api.requests();
    assert_eq!(requests.len(), 9);
    let invalid = requests[7]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        invalid.starts_with("Error: the arguments are not valid JSON"),
        "{invalid}"
    );
    // What the model was offered: no left-out tool, no `$schema` (the content
    // server's tools carry one; the request checker refuses it too).
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"fs__write_file") && tools.contains(&"content__export_handbook"));
    assert!(!tools.contains(&"everything__echo"), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("everything__trigger-")));
    assert!(!requests[0]["tools"].to_string().contains("$schema"));
    let last_tool_message = |i: usize| -> String {
        let messages = requests[i]["messages"].as_array().unwrap();
        let m = messages.last().unwrap();
        assert_eq!(m["role"], "tool");
        m["content"].as_str().unwrap().to_owned()
    };
    let withheld = last_tool_message(1);
    assert!(
        withheld.contains("withheld") && withheld.contains("not run"),
        "{withheld}"
    );
    let env = last_tool_message(2);
    assert!(env.contains("\"PATH\""), "{env}");
    assert!(
        !env.contains(SECRET) && !env.contains("OPENAI_API_KEY"),
        "{env}"
    );
    // 2 MB of handbook, fitted: the request stays inside the window.
    let handbook = last_tool_message(3);
    assert!(handbook.contains("tokens omitted"), "{}", &handbook[..200]);
    // Each request within the window less the reserved output, the handbook taking
    // most of what was left (not a fixed cap: max_tool_result_tokens is 1 000 000).
    let tk = Tokenizer::new(Encoding::O200kBase).unwrap();
    let tokens = |i: usize| -> usize {
        requests[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_str())
            .map(|c| tk.count(c))
            .sum()
    };
    for i in 0..requests.len() {
        assert!(
            tokens(i) <= 16000 - 1000,
            "request {i}: {} tokens",
            tokens(i)
        );
    }
    assert!(tk.count(&handbook) > 10_000, "{}", tk.count(&handbook));
    assert!(
        last_tool_message(4).contains("archived 3 notes"),
        "{}",
        last_tool_message(4)
    );
    assert!(last_tool_message(5).contains("withheld"));

    // The trace of `run --json`.
    let calls: Vec<&Value> = doc["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"] == "tool_call")
        .collect();
    let summary: Vec<(&str, bool, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["tool"].as_str().unwrap(),
                c["withheld"].as_bool().unwrap(),
                c["consent"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "write_file",
                true,
                "denied by rules[0] (server fs, tool write_*)"
            ),
            (
                "get-env",
                false,
                "allowed by the default for read-only tools"
            ),
            (
                "export_handbook",
                false,
                "allowed by the default for read-only tools"
            ),
            (
                "archive_notes",
                false,
                "allowed by the default for tool calls"
            ),
            (
                "move_file",
                true,
                "asked (the default for destructive tools): denied"
            ),
        ]
    );
    assert!(calls[2]["result_bytes"].as_u64().unwrap() > 2_000_000);
    assert_eq!(calls[0]["arguments"]["content"], "pwned");
    assert!(calls.iter().all(|c| c["origin"] == "model"));

    // The history, as JSON and as the table.
    let out = hostpipe(&["history", "--tools", "--json"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let history: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools: Vec<(&str, bool)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["tool"].as_str().unwrap(),
                e["withheld"].as_bool().unwrap(),
            )
        })
        .collect();
    // Newest turn first, each turn's calls in order: the unparseable call is recorded
    // (not withheld: refused as invalid, before any decision).
    assert_eq!(
        tools,
        vec![
            ("write_file", false),
            ("write_file", true),
            ("write_file", true),
            ("get-env", false),
            ("export_handbook", false),
            ("archive_notes", false),
            ("move_file", true)
        ]
    );
    assert_eq!(history[0]["arguments"], "{not json");
    assert_eq!(
        history[0]["error"],
        "invalid arguments for `fs__write_file`: arguments must be a JSON object, not \"{not json\""
    );
    assert_eq!(history[2]["turn_id"], doc["turn_id"]);
    assert_eq!(history[2]["arguments"]["content"], "pwned");
    let out = hostpipe(&["history", "--tools", "--errors"])
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("write_file") && table.contains("move_file"),
        "{table}"
    );
    assert!(!table.contains("get-env"), "{table}");
}

/// The policy in-process, through [`hostpipe_engine::Pipeline::call_tool`] and the
/// turn's executor: a left-out tool cannot be called; `read_resource` follows the
/// pipeline's resource rules (audience, MIME deny) and `list_resources` does not offer
/// a user-only resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_left_out_tool_cannot_be_called_and_read_resource_follows_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let host = connect(vec![
        filesystem("fs", dir.path()),
        python("content", "content_server.py"),
    ])
    .await;
    let p = crate::pipeline(
        &host,
        r#"
[pipelines.default]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "preview"

[pipelines.default.bind_mcp_servers]
servers = ["fs", "content"]

[pipelines.default.resource_context_injection]
mime_deny = ["image/*"]

[pipelines.default.tool_assembly]
include = ["fs__*", "content__*", "list_resources", "read_resource"]
exclude = ["fs__move_file"]
"#,
    );
    let outcome = p
        .call_tool(
            Turn::new("default", ""),
            "fs",
            "move_file",
            json!({"source": "a", "destination": "b"}),
            CallOrigin::Api,
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome.result, Err(ToolError::NotOffered { .. })),
        "{:?}",
        outcome.result
    );
    assert_eq!(outcome.name, None);
    // Refused, and recorded as withheld by the policy.
    let refused = outcome.trace.tool_calls().next().unwrap();
    assert_eq!(
        (refused.server.as_str(), refused.tool.as_str()),
        ("fs", "move_file")
    );
    assert!(refused.withheld && refused.is_error);
    assert_eq!(
        refused.error.as_deref(),
        Some(
            "tool `fs__move_file` is not offered by this pipeline (tool_assembly.include and exclude)"
        )
    );
    let listed = p
        .call_tool(
            Turn::new("default", ""),
            "fs",
            "list_allowed_directories",
            Value::Null,
            CallOrigin::Api,
        )
        .await
        .unwrap();
    assert_eq!(listed.name.as_deref(), Some("fs__list_allowed_directories"));
    let text = match &listed.result.as_ref().unwrap().content[0] {
        hostpipe_core::ToolContent::Text { text } => text.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        text.contains(&*dir.path().canonicalize().unwrap().to_string_lossy()),
        "{text}"
    );
    let record = listed.trace.tool_calls().next().unwrap();
    assert_eq!(record.origin, CallOrigin::Api);
    // No consent section: no gate, no decision recorded.
    assert_eq!(record.consent, None);

    let (request, _) = crate::prepare(&p, Turn::new("default", "hello")).await;
    let executor = request.tool_executor.clone().unwrap();
    let err = executor
        .call("fs__move_file", json!({"source": "a", "destination": "b"}))
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::NotOffered { .. }), "{err}");
    assert!(
        err.to_string().contains("not offered by this pipeline"),
        "{err}"
    );

    let text_of = |r: &hostpipe_core::ToolCallResult| -> String {
        r.content
            .iter()
            .map(|c| match c {
                hostpipe_core::ToolContent::Text { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    let listing = executor
        .call("list_resources", json!({"server": "content"}))
        .await
        .unwrap();
    let listing = text_of(&listing);
    assert!(listing.contains("big://handbook.md"), "{listing}");
    assert!(!listing.contains("doc://private"), "{listing}");
    let private = executor
        .call(
            "read_resource",
            json!({"server": "content", "uri": "doc://private"}),
        )
        .await
        .unwrap();
    assert!(private.is_error);
    assert_eq!(
        text_of(&private),
        "[resource doc://private from `content` not read: it is meant for the user, not the model]"
    );
    let image = executor
        .call(
            "read_resource",
            json!({"server": "content", "uri": "img://large.png"}),
        )
        .await
        .unwrap();
    assert!(image.is_error);
    assert!(
        text_of(&image).contains("the pipeline's policy does not allow it"),
        "{}",
        text_of(&image)
    );

    // A rule that denies the model a resource: not listed, and its read withheld, the
    // tool call's record saying so with the read's decision.
    let guarded = crate::pipeline(
        &host,
        r#"
[pipelines.default]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "preview"

[pipelines.default.bind_mcp_servers]
servers = ["content"]

[pipelines.default.consent]
rules = [{ server = "content", uri = "big://*", model = "deny" }]
"#,
    );
    let (request, mut trace) = crate::prepare(&guarded, Turn::new("default", "hello")).await;
    let executor = request.tool_executor.clone().unwrap();
    let listing = text_of(
        &executor
            .call("list_resources", json!({"server": "content"}))
            .await
            .unwrap(),
    );
    assert!(!listing.contains("big://handbook.md"), "{listing}");
    assert!(listing.contains("blob://report.pdf"), "{listing}");
    let outcome = guarded
        .call_tool(
            Turn::new("default", ""),
            "content",
            "export_handbook",
            Value::Null,
            CallOrigin::Api,
        )
        .await
        .unwrap();
    // The tool is another matter: read rules do not decide calls.
    assert!(!outcome.result.unwrap().is_error);
    let read = executor
        .call(
            "read_resource",
            json!({"server": "content", "uri": "big://handbook.md"}),
        )
        .await
        .unwrap();
    assert!(read.is_error);
    assert_eq!(
        text_of(&read),
        "[resource big://handbook.md from `content` withheld: reading it was not allowed]"
    );
    trace.collect_reported();
    let call = trace.tool_calls().last().unwrap();
    assert_eq!(call.tool, "read_resource");
    assert!(call.withheld && call.is_error);
    assert_eq!(
        call.consent.as_deref(),
        Some("denied by rules[0] (server content, uri big://*)")
    );
}

/// Protocol 2 of the remote runner, with a Python agent behind `hostpipe serve`: the
/// agent calls the turn's tools through the tool endpoint under the pipeline's policy
/// (a sum, a denied write, a wrong token, an unknown tool); the calls are in the
/// history with origin `agent`; the token is refused once the turn is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_calls_the_turns_tools_through_hostpipe() {
    use tokio::io::AsyncBufReadExt as _;
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let endpoint_file = dir.path().join("endpoint.json");
    let mut agent = tokio::process::Command::new(py())
        .arg(root().join("tests/clients/remote_agent.py"))
        .arg(&endpoint_file)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let port = tokio::io::BufReader::new(agent.stdout.take().unwrap())
        .lines()
        .next_line()
        .await
        .unwrap()
        .unwrap();
    let config = dir.path().join("hostpipe.toml");
    let text = servers(&files)
        + &format!(
            r#"
[pipelines.agent]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "remote"

[pipelines.agent.remote]
url = "http://127.0.0.1:{port}/agent"
protocol = 2
max_tool_calls = 5
"#
        )
        + &policy("agent");
    std::fs::write(&config, text).unwrap();
    let svc = Service::start(&config, "memory", &[]).await;
    let target = files.join("agent.txt");
    let calls = json!([
        {"name": "everything__get-sum", "arguments": {"a": 20, "b": 22}},
        {"name": "fs__write_file", "arguments": {"path": target, "content": "from the agent"}},
        {"name": "everything__echo", "arguments": {"message": "left out"}},
    ]);
    let res = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"pipeline": "agent", "message": "add and write",
                      "conversation_id": "c-agent", "variables": {"calls": calls.to_string()}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let doc: Value = res.json().await.unwrap();
    assert_eq!(doc["failed"], false, "{doc:#}");
    let seen: Value = serde_json::from_str(doc["reply"].as_str().unwrap()).unwrap();
    let offered: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(offered.contains(&"everything__get-sum") && !offered.contains(&"everything__echo"));
    assert_eq!(
        seen["calls"][0],
        json!({"status": 200, "text": "The sum of 20 and 22 is 42.", "isError": false})
    );
    assert_eq!(seen["calls"][1]["status"], 200);
    assert_eq!(seen["calls"][1]["isError"], true);
    assert!(
        seen["calls"][1]["text"]
            .as_str()
            .unwrap()
            .contains("withheld"),
        "{seen:#}"
    );
    assert!(!target.exists(), "the denied write ran");
    assert_eq!(seen["calls"][2]["status"], 403);
    assert_eq!(seen["calls"][2]["code"], "tool_not_offered");
    assert_eq!(seen["wrong_token"]["status"], 401);
    assert_eq!(seen["wrong_token"]["code"], "invalid_token");
    assert_eq!(seen["unknown_tool"]["status"], 404);
    assert_eq!(seen["unknown_tool"]["code"], "unknown_tool");

    // The history: the agent's calls, under the turn and its conversation.
    let res = reqwest::Client::new()
        .get(svc.url("/v1/history/tool-calls?conversation=c-agent"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let history: Value = res.json().await.unwrap();
    let calls: Vec<(&str, &str, bool)> = history["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["turn_id"], doc["turn_id"]);
            (
                c["tool"].as_str().unwrap(),
                c["origin"].as_str().unwrap(),
                c["withheld"].as_bool().unwrap(),
            )
        })
        .collect();
    // In call order, the refusals too (the wrong token never reached the turn).
    assert_eq!(
        calls,
        vec![
            ("get-sum", "agent", false),
            ("write_file", "agent", true),
            ("echo", "agent", true),
            ("nobody__nothing", "agent", false)
        ]
    );

    // The turn is over: its token no longer works.
    let endpoint: Value =
        serde_json::from_str(&std::fs::read_to_string(&endpoint_file).unwrap()).unwrap();
    assert!(
        endpoint["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    assert_eq!(endpoint["max_calls"], 5);
    let res = reqwest::Client::new()
        .post(endpoint["url"].as_str().unwrap())
        .bearer_auth(endpoint["token"].as_str().unwrap())
        .json(&json!({"name": "everything__get-sum", "arguments": {"a": 1, "b": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let _ = agent.kill().await;
}
