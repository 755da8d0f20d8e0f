//! Packaging (docs/deploy.md): `hostpipe healthcheck` against a real `hostpipe serve`;
//! the Dockerfile linted by hadolint and read by BuildKit's own parser (the `dockerfile`
//! package); the compose and Kubernetes examples read by PyYAML and checked against the
//! Dockerfile and against what the binary really serves (the ConfigMap's config runs as
//! two instances on one PostgreSQL store). No image is built here: there is no container
//! builder in the test environment (docs/deploy.md says what was built and how).

use std::path::{Path, PathBuf};
use std::process::Output;

use hostpipe_tests::{Postgres, Service, root};
use serde_json::Value;

/// A program installed into `tests/.venv` from `tests/requirements.txt`.
fn venv_bin(name: &str) -> PathBuf {
    let path = root().join("tests/.venv/bin").join(name);
    assert!(
        path.exists(),
        "{} not found: run `bash tests/run.sh` (it installs tests/requirements.txt into tests/.venv)",
        path.display()
    );
    path
}

/// Runs `hostpipe ARGS` (off the async runtime) and returns its output.
async fn hostpipe(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        hostpipe_tests::hostpipe_command()
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs Python `code` in `tests/.venv` with `arg` and parses what it prints as JSON.
fn python_json(code: &str, arg: &Path) -> Value {
    let out = std::process::Command::new(venv_bin("python"))
        .arg("-c")
        .arg(code)
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python on {}: {}",
        arg.display(),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The YAML documents of `path` (PyYAML's `safe_load_all`), as JSON.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let code = "import json, sys, yaml\n\
                json.dump(list(yaml.safe_load_all(open(sys.argv[1], encoding='utf-8'))), sys.stdout)";
    match python_json(code, path) {
        Value::Array(docs) => docs,
        other => panic!("not a list of documents: {other}"),
    }
}

/// One instruction of the Dockerfile, as BuildKit's parser reads it.
#[derive(Debug, serde::Deserialize)]
struct Instruction {
    cmd: String,
    flags: Vec<String>,
    value: Vec<String>,
}

/// The repository's Dockerfile, parsed by the `dockerfile` package (BuildKit's parser).
fn dockerfile() -> Vec<Instruction> {
    let code = "import json, sys, dockerfile\n\
                json.dump([{'cmd': c.cmd, 'flags': list(c.flags), 'value': list(c.value)} \
                for c in dockerfile.parse_file(sys.argv[1])], sys.stdout)";
    serde_json::from_value(python_json(code, &root().join("Dockerfile"))).unwrap()
}

/// The stages of the Dockerfile in order: (name, instructions).
fn stages(instructions: &[Instruction]) -> Vec<(String, Vec<&Instruction>)> {
    let mut stages: Vec<(String, Vec<&Instruction>)> = Vec::new();
    for i in instructions {
        if i.cmd == "FROM" {
            match i.value.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => {
                    stages.push((name.clone(), Vec::new()));
                }
                other => panic!("every stage is named: FROM {other:?}"),
            }
        } else if let Some((_, body)) = stages.last_mut() {
            body.push(i);
        }
    }
    stages
}

/// The last `cmd` instruction of `stage`, or of the stage it is built `FROM`.
fn last<'a>(
    stages: &'a [(String, Vec<&'a Instruction>)],
    instructions: &'a [Instruction],
    stage: &str,
    cmd: &str,
) -> Option<&'a Instruction> {
    let (_, body) = stages.iter().find(|(n, _)| n == stage)?;
    if let Some(i) = body.iter().rev().find(|i| i.cmd == cmd) {
        return Some(i);
    }
    let from = instructions
        .iter()
        .find(|i| i.cmd == "FROM" && i.value.last().map(String::as_str) == Some(stage))?;
    last(stages, instructions, &from.value[0], cmd)
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the manifest"))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_says_healthy_only_for_a_2xx_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[mcp_servers.demo]\ncommand = {:?}\nargs = [\"demo-server\"]\n",
            hostpipe_cli::config::EMBEDDED_TOML,
            hostpipe_tests::hostpipe_bin()
        ),
    )
    .unwrap();
    let svc = Service::start(&config, "memory", &[]).await;

    // The Dockerfile's HEALTHCHECK, pointed at this service's address.
    let instructions = dockerfile();
    let stages = stages(&instructions);
    let check = last(&stages, &instructions, "runtime", "HEALTHCHECK").expect("a HEALTHCHECK");
    let argv = &check.value;
    assert_eq!(argv[..3], ["CMD", "hostpipe", "healthcheck"], "{argv:?}");
    let healthz = svc.url("/healthz");
    let mut args: Vec<&str> = argv[2..].iter().map(String::as_str).collect();
    args.push(&healthz);
    let out = hostpipe(&args).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{healthz}: 200 OK\n"));

    let out = hostpipe(&["healthcheck", &svc.url("/readyz")]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A route that wants a token: an answer, but not a healthy one.
    let servers = svc.url("/v1/servers");
    let out = hostpipe(&["healthcheck", &servers]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("hostpipe healthcheck: {servers} answered 401 Unauthorized\n")
    );
    assert_eq!(text(&out.stdout), "");

    // Nobody listening.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let url = format!("http://{closed}/healthz");
    let out = hostpipe(&["healthcheck", &url]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("hostpipe healthcheck: {url}: ")) && err.contains("refused"),
        "{err}"
    );

    // A listener that takes the connection and never answers: the timeout ends it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/healthz", silent.local_addr().unwrap());
    let out = hostpipe(&["healthcheck", "--timeout", "300ms", &url]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("hostpipe healthcheck: {url} did not answer within 300ms\n")
    );
    drop(silent);

    // Not an HTTP URL: bad usage.
    let out = hostpipe(&["healthcheck", "ftp://127.0.0.1/healthz"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("the scheme is `ftp`, not http or https"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let hadolint = venv_bin("hadolint");
    let lint = |path: &Path| {
        std::process::Command::new(&hadolint)
            .args(["--no-color", "--failure-threshold", "info"])
            .arg(path)
            .current_dir(root())
            .output()
            .unwrap()
    };
    let out = lint(&root().join("Dockerfile"));
    assert_eq!(
        (out.status.code(), text(&out.stdout).as_str()),
        (Some(0), ""),
        "hadolint findings: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // The linter is awake: a Dockerfile with the usual mistakes gets their rules.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("Dockerfile");
    std::fs::write(
        &bad,
        "FROM debian:latest\nRUN apt-get update && apt-get install -y curl\n",
    )
    .unwrap();
    let out = lint(&bad);
    let findings = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{findings}");
    for rule in ["DL3007", "DL3008", "DL3009", "DL3015"] {
        assert!(findings.contains(rule), "{rule} missing from: {findings}");
    }
}

#[test]
fn the_dockerfile_builds_two_non_root_images_that_serve_on_8787() {
    let instructions = dockerfile();
    let stages = stages(&instructions);
    let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
    // The last stage is what `docker build` makes without --target.
    assert_eq!(
        names,
        ["build", "base", "node", "runtime-stdio", "runtime"],
        "stages"
    );
    for stage in ["runtime", "runtime-stdio"] {
        let user = last(&stages, &instructions, stage, "USER").unwrap();
        assert_eq!(user.value, ["10001:10001"], "{stage}: USER");
        let cmd = last(&stages, &instructions, stage, "CMD").unwrap();
        assert_eq!(cmd.value, ["serve", "--listen", "0.0.0.0:8787"], "{stage}");
        let expose = last(&stages, &instructions, stage, "EXPOSE").unwrap();
        assert_eq!(expose.value, ["8787"], "{stage}");
        let entry = last(&stages, &instructions, stage, "ENTRYPOINT").unwrap();
        assert_eq!(entry.value.last().map(String::as_str), Some("hostpipe"));
    }
    // The release build uses the lock file and cache mounts.
    let build = stages[0]
        .1
        .iter()
        .find(|i| i.cmd == "RUN")
        .expect("the build step");
    assert!(
        build.value[0].starts_with("cargo build --release --locked -p hostpipe"),
        "{:?}",
        build.value
    );
    assert_eq!(
        build
            .flags
            .iter()
            .filter(|f| f.starts_with("--mount=type=cache"))
            .count(),
        2
    );
    // The build context leaves out what is big or private.
    let ignored = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    for entry in [".git", "**/target", "tests/node_modules", "tests/.venv"] {
        assert!(ignored.lines().any(|l| l == entry), "{entry} not ignored");
    }
}

#[test]
fn the_compose_examples_build_the_dockerfile_and_check_readiness() {
    let instructions = dockerfile();
    let stage_names: Vec<String> = stages(&instructions).into_iter().map(|(n, _)| n).collect();
    for file in ["compose.yaml", "compose-postgres.yaml"] {
        let path = root().join("docs/examples").join(file);
        let docs = yaml_documents(&path);
        assert_eq!(docs.len(), 1, "{file}");
        let hostpipe = &docs[0]["services"]["hostpipe"];
        let build = &hostpipe["build"];
        let context = path
            .parent()
            .unwrap()
            .join(build["context"].as_str().unwrap());
        assert!(
            context
                .join(build["dockerfile"].as_str().unwrap())
                .canonicalize()
                .unwrap()
                == root().join("Dockerfile").canonicalize().unwrap(),
            "{file}: build {build}"
        );
        let target = build["target"].as_str().unwrap().to_owned();
        assert!(stage_names.contains(&target), "{file}: target {target}");
        assert_eq!(
            strings(&hostpipe["healthcheck"]["test"]),
            [
                "CMD",
                "hostpipe",
                "healthcheck",
                "http://127.0.0.1:8787/readyz"
            ],
            "{file}"
        );
        let command = strings(&hostpipe["command"]);
        assert_eq!(
            command[..3],
            ["serve", "--listen", "0.0.0.0:8787"],
            "{file}"
        );
        assert!(
            hostpipe["environment"]["HOSTPIPE_TOKEN"]
                .as_str()
                .unwrap()
                .starts_with("${HOSTPIPE_TOKEN:?"),
            "{file}: the admin token must be given"
        );
    }

    let docs = yaml_documents(&root().join("docs/examples/compose-postgres.yaml"));
    let services = &docs[0]["services"];
    let store = services["hostpipe"]["environment"]["HOSTPIPE_STORE_URL"]
        .as_str()
        .unwrap();
    assert_eq!(
        store,
        "postgres://hostpipe:${POSTGRES_PASSWORD}@postgres:5432/hostpipe"
    );
    assert_eq!(
        services["hostpipe"]["depends_on"]["postgres"]["condition"],
        "service_healthy"
    );
    assert_eq!(
        services["postgres"]["environment"]["POSTGRES_USER"],
        "hostpipe"
    );
    assert_eq!(
        services["postgres"]["environment"]["POSTGRES_DB"],
        "hostpipe"
    );
    assert_eq!(services["hostpipe"]["deploy"]["replicas"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifest_runs_two_ready_replicas_on_postgres() {
    let docs = yaml_documents(&root().join("docs/examples/kubernetes.yaml"));
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Secret", "ConfigMap", "Deployment", "Service"]);
    let secret = kind(&docs, "Secret");
    let config_map = kind(&docs, "ConfigMap");
    let deployment = kind(&docs, "Deployment");
    let service = kind(&docs, "Service");

    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    // The image's user, and nothing root can do.
    let instructions = dockerfile();
    let stages = stages(&instructions);
    let user = last(&stages, &instructions, "runtime", "USER").unwrap();
    assert_eq!(
        format!(
            "{}:{}",
            pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
        ),
        user.value[0]
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    // Probes on the routes that answer them, on the port the image exposes.
    assert_eq!(container["ports"][0]["name"], "http");
    let expose = last(&stages, &instructions, "runtime", "EXPOSE").unwrap();
    assert_eq!(
        container["ports"][0]["containerPort"].to_string(),
        expose.value[0]
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "http");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["livenessProbe"]["httpGet"]["port"], "http");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    // The grace period covers the preStop pause and the config's shutdown timeout.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let pause: u64 = strings(&container["lifecycle"]["preStop"]["exec"]["command"])[1]
        .parse()
        .unwrap();
    let toml_text = config_map["data"]["hostpipe.toml"].as_str().unwrap();
    let config = hostpipe_cli::config::parse(toml_text, "kubernetes.yaml").unwrap();
    let shutdown_ms = config.serve.shutdown_timeout_ms.unwrap();
    assert!(
        grace * 1000 > pause * 1000 + shutdown_ms,
        "grace {grace} s, pause {pause} s, shutdown {shutdown_ms} ms"
    );
    // The secrets come from the Secret, under the names hostpipe reads.
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"],
        secret["metadata"]["name"]
    );
    let mut keys: Vec<&str> = secret["stringData"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "HOSTPIPE_CREDENTIAL_KEY",
            "HOSTPIPE_READ_TOKEN",
            "HOSTPIPE_STORE_URL",
            "HOSTPIPE_TOKEN",
            "HOSTPIPE_TURN_TOKEN"
        ]
    );
    // The config is the ConfigMap's key, mounted where --config looks.
    let args = strings(&container["args"]);
    let at = args.iter().position(|a| *a == "--config").unwrap();
    let config_path = Path::new(args[at + 1]);
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .unwrap();
    assert_eq!(
        config_path.parent().unwrap(),
        Path::new(mount["mountPath"].as_str().unwrap())
    );
    let key = config_path.file_name().unwrap().to_str().unwrap();
    assert!(config_map["data"].get(key).is_some(), "no key {key}");
    assert_eq!(args[..3], ["serve", "--listen", "0.0.0.0:8787"]);

    // The ConfigMap's config, as two replicas on one PostgreSQL store: `hostpipe` on
    // PATH (as in the image), the store URL from the environment (as from the Secret).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(key);
    std::fs::write(&path, toml_text).unwrap();
    let postgres = Postgres::start();
    let bin_dir = hostpipe_tests::hostpipe_bin()
        .parent()
        .unwrap()
        .display()
        .to_string();
    let search = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let env = [("PATH", search.as_str())];
    let first = Service::start_with_env(&path, &postgres.url, &[], &env).await;
    let second = Service::start_with_env(&path, &postgres.url, &[], &env).await;
    let client = reqwest::Client::new();
    for svc in [&first, &second] {
        let probe = |path: &Value| svc.url(path.as_str().unwrap());
        let live = client
            .get(probe(&container["livenessProbe"]["httpGet"]["path"]))
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(live.status(), 200);
        let ready = client
            .get(probe(&container["readinessProbe"]["httpGet"]["path"]))
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
        let body: Value = ready.json().await.unwrap();
        assert_eq!(body["status"], "ready", "{body}");
        assert_eq!(body["store"]["ok"], true, "{body}");
        assert!(
            body["store"]["store"]
                .as_str()
                .unwrap()
                .starts_with("postgres"),
            "{body}"
        );
        assert_eq!(body["servers"][0]["name"], "demo", "{body}");
        assert_eq!(body["servers"][0]["status"]["state"], "connected", "{body}");
    }
}
