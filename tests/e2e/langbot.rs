//! The LangBot plugin (plugins/langbot/): its pytest suite, which drives the plugin as
//! LangBot does with the langbot-plugin SDK's own event types (tests/.venv-langbot),
//! run against a real `hostpipe serve` on the embedded default pipeline (the demo MCP
//! server attached).

use std::time::Duration;

use hostpipe_tests::{Service, TURN_TOKEN, root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_langbot_plugin_puts_the_pipelines_context_into_the_message() {
    let python = root().join("tests/.venv-langbot/bin/python");
    assert!(
        python.exists(),
        "the LangBot plugin's venv is not at {}: run `bash tests/run.sh` (it installs plugins/langbot/requirements-dev.txt)",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    let text = format!(
        "[mcp_servers.demo]\ncommand = {:?}\nargs = [\"demo-server\"]\n{}",
        hostpipe_tests::hostpipe_bin().display().to_string(),
        hostpipe_cli::config::EMBEDDED_TOML
    );
    std::fs::write(&config, text).unwrap();
    let store = format!("sqlite://{}", dir.path().join("h.db").display());
    let svc = Service::start(&config, &store, &[]).await;
    let run = tokio::process::Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(root().join("plugins/langbot"))
        .env("HOSTPIPE_URL", &svc.base)
        .env("HOSTPIPE_TOKEN", TURN_TOKEN)
        .env("HOSTPIPE_PIPELINE", "default")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the plugin's tests did not finish within 300 s")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{text}\n--- hostpipe:\n{}",
        svc.log_text()
    );
    // Every test ran (none skipped for a missing hostpipe): pytest's closing line.
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains(" passed"))
        .unwrap_or_default();
    assert!(summary.starts_with("14 passed"), "{text}");
    assert!(!summary.contains("skipped"), "{text}");
}
