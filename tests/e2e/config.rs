//! Configuration errors name the file and the key, before anything connects.

use std::sync::Arc;

use hostpipe_mcp::{HostOptions, McpHost, ServerConfig};

fn build(toml: &str) -> Result<(), String> {
    let config = hostpipe_cli::config::parse(toml, "bad.toml").map_err(|e| e.to_string())?;
    let host = Arc::new(McpHost::new(
        vec![
            ServerConfig::stdio("a", "true", Vec::<String>::new()),
            ServerConfig::stdio("b", "true", Vec::<String>::new()),
        ],
        HostOptions::default(),
    ));
    config
        .build_pipelines(&hostpipe_cli::registry().unwrap(), host, None)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn bad_configs_are_refused_with_file_and_key() {
    let cases = [
        (
            "[pipelines.default]\n[pipelines.default.consent]\nrules = [{ server = \"nope\", host = \"deny\" }]",
            "bad.toml: pipelines.default.consent.rules[0].server: unknown MCP server `nope`; configured servers: a, b",
        ),
        (
            "[pipelines.default]\n[pipelines.default.consent]\nrules = [{ server = \"a\", tool = \"a__write_file\", call = \"deny\" }]",
            "bad.toml: pipelines.default.consent.rules[0].tool: `a__write_file` is the name the model sees; a rule names the tool as its server lists it: `tool = \"write_file\"` with `server = \"a\"`",
        ),
        (
            "[pipelines.default.tool_assembly]\nexclude = [\"a__*\", \"\"]",
            "bad.toml: pipelines.default.tool_assembly.exclude[1]: an empty glob matches no tool: remove it",
        ),
        (
            "[store]\nurll = \"sqlite:x.db\"",
            "bad.toml: store.urll: unknown field `urll`, expected `url` or `history_retention_days` (line 2, column 1)",
        ),
        (
            "[pipelines.default]\nstages = [\"bind_mcp_servers\", \"nope\"]",
            "bad.toml: pipelines.default.stages[1]: unknown stage `nope`; known stages: bind_mcp_servers, prompt_expansion, resource_mentions, resource_context_injection, redact_pii, tool_assembly",
        ),
        (
            "[pipelines.default]\nstages = [\"tool_assembly\", \"tool_assembly\"]",
            "bad.toml: pipelines.default.stages[1]: `tool_assembly` is listed twice",
        ),
        (
            "[pipelines.default]\nrunner = \"gpt\"",
            "bad.toml: pipelines.default.runner: unknown runner `gpt`; known runners: dify, local, preview, remote",
        ),
        (
            "[pipelines.default.bind_mcp_servers]\nservers = [\"a\"]\n[pipelines.default.resource_context_injection]\nattachments = [{ server = \"b\", uri = \"x://y\" }]",
            "bad.toml: pipelines.default.resource_context_injection.attachments[0].server: `b` is not bound by this pipeline's bind_mcp_servers (bound: a)",
        ),
        (
            "[pipelines.default.resource_context_injection]\nbudget_tokens = 10\nbudget_share = 0.5",
            "bad.toml: pipelines.default.resource_context_injection.budget_share: give `budget_tokens` or `budget_share`, not both",
        ),
        (
            "[pipelines.default.resource_context_injection]\nattachments = [{ server = \"a\", template = \"x://{id}\", arguments = { id = { var = \"i\", dflt = \"1\" } } }]",
            "bad.toml: pipelines.default.resource_context_injection.attachments[0].arguments.id: expected a string, or { var = \"NAME\", default = \"VALUE\" } to take a turn variable",
        ),
        (
            "[pipelines.default.resource_context_injection]\nattachments = [{ server = \"a\", template = \"x://{id}\" }]",
            "bad.toml: pipelines.default.resource_context_injection.attachments[0].arguments: URI template `x://{id}` needs `id`",
        ),
        (
            "[pipelines.default.tool_assembly]\nexploration = false",
            "bad.toml: pipelines.default.tool_assembly.exploration: unknown field `exploration`, expected one of `exploration_tools`, `max_read_tokens`, `include`, `exclude`",
        ),
        (
            "[mcp_servers.x]\ncommand = \"a\"\nargz = []",
            "bad.toml: mcp_servers.x.argz: unknown key; known keys: type, command, args, env, cwd, url, headers, disabled, connect_timeout_ms, request_timeout_ms, protocol, inherit_env",
        ),
        (
            "[model]\ncontext_window = 1000\nmax_output_tokens = 1000",
            "bad.toml: model.max_output_tokens: 1000 leaves no input tokens in a 1000-token context window",
        ),
        (
            "[pipeline.default]",
            "bad.toml: pipeline: unknown field `pipeline`, expected one of `model`, `host`, `store`, `serve`, `mcp_servers`, `summarizers`, `embedders`, `rerankers`, `pipelines` (line 1, column 2)",
        ),
    ];
    for (toml, expected) in cases {
        assert_eq!(build(toml).err().as_deref(), Some(expected), "for:\n{toml}");
    }
}

/// `run --runner preview` and `serve`'s preview turns choose another runner than the
/// pipeline's: the pipeline's own runner is not built (its section may not even be
/// valid for it), and the file is not rewritten.
#[test]
fn a_chosen_runner_replaces_the_pipelines_own_without_building_it() {
    let toml = r#"
[pipelines.default]
runner = "local"
[pipelines.default.local]
base_url = 5
model = "m"
"#;
    let config = hostpipe_cli::config::parse(toml, "local.toml").unwrap();
    let host = Arc::new(McpHost::new(Vec::new(), HostOptions::default()));
    let registry = hostpipe_cli::registry().unwrap();
    let err = config
        .build_pipelines(&registry, host.clone(), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("local.toml: pipelines.default.local.base_url: "),
        "{err}"
    );
    let preview = hostpipe_cli::config::RunnerChoice::named("preview");
    let pipelines = config
        .build_pipelines(&registry, host.clone(), Some(&preview))
        .unwrap();
    assert_eq!(pipelines["default"].runner_name(), "preview");
    assert_eq!(config.pipelines["default"].runner, "local");
    let runners = config.build_runners(&registry, host, &preview).unwrap();
    assert_eq!(runners.keys().collect::<Vec<_>>(), ["default"]);
}
