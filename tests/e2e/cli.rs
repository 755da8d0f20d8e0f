//! The `hostpipe` binary as a user runs it.

use std::process::Command;

use hostpipe_tests::{hostpipe_bin, hostpipe_command, root};

fn hostpipe(args: &[&str]) -> (bool, String, String) {
    hostpipe_in(&root(), args)
}

fn hostpipe_in(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = hostpipe_command()
        .args(args)
        .current_dir(dir)
        .env_remove("HOSTPIPE_LOG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn run_on_the_embedded_default_previews_blocks_from_the_demo_server() {
    let (ok, stdout, stderr) = hostpipe(&["run", "What does the config say?"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(" server=\"demo\" uri=\"demo://config/app.json\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"service\": \"acme-assistant\""));
    assert!(
        stdout.contains("uri=\"demo://docs/deployment\""),
        "the template default topic"
    );
    assert!(stdout.contains("== user\nWhat does the config say?"));
    assert!(stdout.contains("demo__search_docs"));
}

#[test]
fn run_json_carries_preview_and_trace_and_message_attachments() {
    let (ok, stdout, stderr) = hostpipe(&[
        "run",
        "--json",
        "--var",
        "topic=incident-runbook",
        "--attach",
        "demo",
        "demo://data/sample.bin",
        "what now?",
    ]);
    assert!(ok, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let blocks = doc["preview"]["context"].as_array().unwrap();
    // Message scope ranks first.
    assert_eq!(blocks[0]["uri"], "demo://data/sample.bin");
    assert_eq!(blocks[0]["scope"], "message");
    assert_eq!(
        blocks[0]["text"],
        "[binary resource demo://data/sample.bin not shown: application/octet-stream is not text (Binary sample, application/octet-stream, 2048 bytes)]"
    );
    assert!(
        blocks
            .iter()
            .any(|b| b["uri"] == "demo://docs/incident-runbook")
    );
    let used = doc["preview"]["budget"]["used_tokens"].as_u64().unwrap();
    let sum: u64 = blocks
        .iter()
        .map(|b| b["tokens_after"].as_u64().unwrap())
        .sum();
    assert_eq!(used, sum);
    assert!(used <= doc["preview"]["budget"]["budget_tokens"].as_u64().unwrap());
    let reads = doc["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"] == "resource_read")
        .count();
    assert_eq!(reads, 5);
}

#[test]
fn servers_resources_and_read_commands() {
    let (ok, stdout, stderr) = hostpipe(&["servers"]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("demo: connected\n"), "{stdout}");
    assert!(stdout.contains("1 tools, 6 resources, 1 resource templates, 1 prompts"));
    let (ok, stdout, _) = hostpipe(&["resources", "demo"]);
    assert!(ok && stdout.contains("demo://docs/{topic}"), "{stdout}");
    let (ok, stdout, _) = hostpipe(&["read", "demo", "demo://docs/handbook.md"]);
    assert!(
        ok && stdout.starts_with("# Acme Support Team Handbook"),
        "{stdout}"
    );
}

#[test]
fn an_unknown_bound_server_is_a_config_error_naming_file_and_key() {
    let dir = std::env::temp_dir().join(format!("hostpipe-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        format!(
            "[mcp_servers.demo]\ncommand = \"{}\"\nargs = [\"demo-server\"]\n\n[pipelines.default.bind_mcp_servers]\nservers = [\"demo\", \"nope\"]\n",
            hostpipe_bin().display()
        ),
    )
    .unwrap();
    let (ok, _, stderr) = hostpipe(&["--config", path.to_str().unwrap(), "run", "hi"]);
    assert!(!ok);
    let expected = format!(
        "error: {}: pipelines.default.bind_mcp_servers.servers[1]: unknown MCP server `nope`; configured servers: demo",
        path.display()
    );
    assert_eq!(stderr.trim(), expected);
}

#[test]
fn the_everything_example_config_runs() {
    let config = root().join("docs/examples/everything.toml");
    // From tests/, `npx` finds the pinned package installed there instead of fetching it.
    let (ok, stdout, stderr) = hostpipe_in(
        &root().join("tests"),
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "What features are there?",
        ],
    );
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("uri=\"demo://resource/static/document/features.md\""),
        "{stdout}"
    );
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_stdio_servers_too() {
    use std::time::{Duration, Instant};
    // A unique duration makes the child findable in /proc.
    let marker = format!("777.{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("hostpipe-sig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hang.toml");
    std::fs::write(
        &path,
        format!("[mcp_servers.hang]\ncommand = \"sleep\"\nargs = [\"{marker}\"]\n[pipelines.default.bind_mcp_servers]\nservers = [\"hang\"]\n"),
    )
    .unwrap();
    let running = |marker: &str| {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == marker.as_bytes()))
        })
    };
    let mut child = hostpipe_command()
        .args(["--config", path.to_str().unwrap(), "run", "hi"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !running(&marker) {
        assert!(Instant::now() < deadline, "the server never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(&marker) {
        assert!(
            Instant::now() < deadline,
            "`sleep {marker}` outlived hostpipe"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn prompts_are_listed_and_run_as_commands() {
    let (ok, stdout, stderr) = hostpipe(&["prompts", "demo"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("/demo:summarize_doc  topic*  — Summarize one of the demo documents"),
        "{stdout}"
    );
    let (ok, stdout, stderr) = hostpipe(&["run", "/demo:summarize_doc topic=incident-runbook"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(
            "== user\nSummarize the document demo://docs/incident-runbook.md in five bullet points."
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("uri=\"demo://docs/incident-runbook.md\""),
        "{stdout}"
    );
    assert!(
        stderr.contains("note: expanded `/demo:summarize_doc`"),
        "{stderr}"
    );
    let out = hostpipe_command()
        .args(["run", "/demo:summarize_doc"])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "a stage answered: exit code 3");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("needs an argument:\n- topic: handbook, deployment or incident-runbook"),
        "{stdout}"
    );
}

#[test]
fn a_command_waits_only_for_the_servers_it_needs_and_flag_mistakes_name_the_flag() {
    let dir = std::env::temp_dir().join(format!("hostpipe-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("slow.toml");
    let exe = hostpipe_bin();
    std::fs::write(
        &config,
        format!(
            r#"
[mcp_servers.demo]
command = "{}"
args = ["demo-server"]
[mcp_servers.stuck]
command = "sleep"
args = ["1000"]
[pipelines.default]
[pipelines.default.bind_mcp_servers]
servers = ["demo"]
"#,
            exe.display()
        ),
    )
    .unwrap();
    let cfg = config.display().to_string();
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = hostpipe(&["--config", &cfg, "resources", "demo"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("demo://docs/handbook.md"));
    let (ok, _, stderr) = hostpipe(&["--config", &cfg, "run", "hello"]);
    assert!(ok, "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the stuck server (30 s connect timeout) was not waited for: {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);

    let out = hostpipe_command()
        .args(["run", "--runner", "nosuch", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "--runner: unknown runner `nosuch`; known runners: dify, local, preview, remote"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hostpipe_command()
        .args(["run", "--model", "x", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model needs --base-url"));
}

#[test]
fn complete_offers_template_and_prompt_values() {
    let (ok, stdout, stderr) =
        hostpipe(&["complete", "demo", "demo://docs/{topic}", "topic", "in"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "incident-runbook\n");
    let (ok, stdout, _) = hostpipe(&["complete", "demo", "prompt:summarize_doc", "topic"]);
    assert!(ok);
    assert_eq!(stdout, "handbook\ndeployment\nincident-runbook\n");
    let (ok, stdout, _) = hostpipe(&["run", "/demo:summarize_doc"]);
    assert!(!ok);
    assert!(
        stdout.contains("(for example: handbook, deployment, incident-runbook)"),
        "{stdout}"
    );
}

/// Writes an `mcpServers` JSON naming hostpipe's own demo server `kb` (and `extra`, a
/// second copy), returning the directory.
fn mcp_json(dir: &std::path::Path) -> std::path::PathBuf {
    let bin = hostpipe_bin();
    let server = serde_json::json!({ "command": bin, "args": ["demo-server"] });
    let doc = serde_json::json!({ "mcpServers": { "kb": server, "extra": server } });
    let path = dir.join("mcp.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// `--mcp-config` alone: its servers and a plain pipeline binding them, nothing of the
/// embedded demo (no `demo` server, no system prompt, no attachments).
#[test]
fn mcp_config_alone_gives_its_servers_and_a_plain_default_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let json = mcp_json(dir.path());
    let json = json.to_str().unwrap();
    let (ok, stdout, stderr) = hostpipe(&["--mcp-config", json, "servers", "--json"]);
    assert!(ok, "{stderr}");
    let servers: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let mut names: Vec<&str> = servers
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["extra", "kb"]);

    let (ok, stdout, stderr) = hostpipe(&[
        "--mcp-config",
        json,
        "--store",
        "none",
        "run",
        "--json",
        "--attach",
        "kb",
        "demo://config/app.json",
        "What does the config say?",
    ]);
    assert!(ok, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let preview = &doc["preview"];
    assert_eq!(preview["system_prompt"], serde_json::Value::Null);
    let uris: Vec<&str> = preview["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        ["demo://config/app.json"],
        "only the message's attachment"
    );
    // Both servers are bound: their tools are offered.
    let tools = preview["tools"].to_string();
    assert!(tools.contains("kb__search_docs"), "{tools}");
    assert!(tools.contains("extra__search_docs"), "{tools}");
}

/// With `--config`, the JSON's servers can be bound in the file like its own: `kb` is
/// bound (required) by pipeline `strict` only; `extra`, bound by no pipeline, goes to
/// `default`. A name in both files is an error naming both.
#[test]
fn mcp_config_servers_are_bound_where_the_toml_binds_them() {
    let dir = tempfile::tempdir().unwrap();
    let json = mcp_json(dir.path());
    let json = json.to_str().unwrap();
    let toml = dir.path().join("hostpipe.toml");
    std::fs::write(
        &toml,
        r#"
[pipelines.default]
stages = ["bind_mcp_servers", "tool_assembly"]

[pipelines.strict]
stages = ["bind_mcp_servers", "tool_assembly"]
[pipelines.strict.bind_mcp_servers]
servers = [{ name = "kb", required = true }]
"#,
    )
    .unwrap();
    let toml = toml.to_str().unwrap();
    let tools = |pipeline: &str| -> String {
        let (ok, stdout, stderr) = hostpipe(&[
            "--config",
            toml,
            "--mcp-config",
            json,
            "--store",
            "none",
            "run",
            "--json",
            "--pipeline",
            pipeline,
            "hi",
        ]);
        assert!(ok, "{pipeline}: {stderr}");
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        doc["preview"]["tools"].to_string()
    };
    let strict = tools("strict");
    assert!(strict.contains("kb__search_docs"), "{strict}");
    assert!(!strict.contains("extra__"), "{strict}");
    let default = tools("default");
    assert!(default.contains("extra__search_docs"), "{default}");
    assert!(!default.contains("kb__"), "{default}");

    std::fs::write(
        dir.path().join("twice.toml"),
        "[mcp_servers.kb]\ncommand = \"true\"\n[pipelines.default]\n",
    )
    .unwrap();
    let twice = dir.path().join("twice.toml");
    let (ok, _, stderr) = hostpipe(&[
        "--config",
        twice.to_str().unwrap(),
        "--mcp-config",
        json,
        "servers",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{json}: mcpServers.kb: a server of this name is already configured in {}",
            twice.display()
        )),
        "{stderr}"
    );
}

/// The exit code and the message say what the user got wrong, not that a server failed
/// (README, "Exit codes": 2 bad usage).
#[test]
fn wrong_targets_are_bad_usage_named_with_what_exists() {
    let run = |args: &[&str]| {
        let out = hostpipe_command()
            .args(args)
            .args(["--store", "memory"])
            .env_remove("HOSTPIPE_LOG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (code, _, err) = run(&["read", "demo", "demo://docs/{topic}"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "error: `demo://docs/{topic}` is a URI template, not a resource: read one of its resources (`hostpipe complete demo 'demo://docs/{topic}' topic` lists values)\n"
    );
    let (code, _, err) = run(&["attach", "--pipeline", "default", "nosuch", "demo://x"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "error: unknown MCP server `nosuch`; configured servers: demo\n"
    );
    // A pin of what the server does not have is refused while the server can tell.
    let (code, _, err) = run(&[
        "attach",
        "--pipeline",
        "default",
        "demo",
        "demo://docs/nowhere.md",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "error: server `demo` has no resource `demo://docs/nowhere.md` (it answered: not found); see `hostpipe resources demo`\n"
    );
    let (code, _, err) = run(&[
        "attach",
        "--pipeline",
        "default",
        "demo",
        "demo://nope/{x}",
        "--arg",
        "x=1",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "error: server `demo` lists no resource template `demo://nope/{x}`; its templates: demo://docs/{topic}; see `hostpipe resources demo`\n"
    );
    // A template's URI, with every argument a literal, is checked like a URI.
    let (code, _, err) = run(&[
        "attach",
        "--pipeline",
        "default",
        "demo",
        "demo://docs/{topic}",
        "--arg",
        "topic=nosuchtopic",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "error: server `demo` has no resource `demo://docs/nosuchtopic` (it answered: not found); see `hostpipe resources demo`\n"
    );
    let (code, out, err) = run(&[
        "attach",
        "--pipeline",
        "default",
        "demo",
        "demo://docs/{topic}",
        "--arg",
        "topic=handbook",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("pinned demo://docs/{topic} (topic=handbook) from server `demo`"),
        "{out}"
    );
    let (code, out, err) = run(&["complete", "demo", "demo://nope/{x}", "x"]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert_eq!(
        err,
        "error: `demo://nope/{x}` is not a resource template of `demo`; its templates: demo://docs/{topic}\n"
    );
    let (code, _, err) = run(&["complete", "demo", "prompt:summarize_doc", "nope"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("prompt `summarize_doc` has no argument `nope`; its arguments: topic"),
        "{err}"
    );
    // A right target with no value for the prefix: nothing on stdout, a note, success.
    let (code, out, err) = run(&["complete", "demo", "demo://docs/{topic}", "topic", "zz"]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "{err}");
    assert_eq!(err, "(no value of `topic` starts with `zz`)\n");
    let (code, out, _) = run(&["complete", "demo", "demo://docs/{topic}", "topic", "dep"]);
    assert_eq!((code, out.as_str()), (Some(0), "deployment\n"));

    // A server that is down cannot tell: the pin is kept, with a warning.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ghost.toml");
    std::fs::write(
        &config,
        "[mcp_servers.ghost]\ncommand = \"/nonexistent/hostpipe-test-server\"\n[pipelines.default.bind_mcp_servers]\nservers = [\"ghost\"]\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let (code, out, err) = run(&[
        "--config",
        &config,
        "attach",
        "--pipeline",
        "default",
        "ghost",
        "g://a",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("pinned g://a from server `ghost`"), "{out}");
    assert!(
        err.contains("warning: could not check that server `ghost` has it (the server is not connected); the pin is kept"),
        "{err}"
    );
}

/// A server that writes a banner on stdout (glued to its first message) still connects
/// at once, and the warning quotes the banner and says stdout is for MCP messages only.
#[test]
fn a_banner_on_stdout_is_named_and_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("banner.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.banner]\ncommand = {:?}\nargs = [{:?}]\n",
            root().join("tests/.venv/bin/python").display().to_string(),
            root()
                .join("tests/servers/banner_server.py")
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = hostpipe_command()
        .args([
            "read",
            "banner",
            "banner://hello",
            "--store",
            "none",
            "--config",
        ])
        .arg(&config)
        .env_remove("HOSTPIPE_LOG")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("hello from behind the banner"), "{stdout}");
    assert!(
        stderr.contains("stdout is for MCP messages only")
            && stderr.contains("Starting banner-server v1.2 ..."),
        "{stderr}"
    );
    // Not after a connect timeout (10 s by default).
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
}
