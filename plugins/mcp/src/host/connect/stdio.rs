//! A stdio server: the child's command (with only the environment it may see), the
//! spawned child in its own process group, its stderr into the log, and its stdout
//! behind the message-size limit.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::AsyncBufReadExt;
use tokio::process::{ChildStdin, ChildStdout, Command};

use crate::config::INHERITED_ENV;
use crate::host::slot::Slot;
use crate::stdio::LineLimited;

/// The stdio transport: the child's stdout (size-limited) and stdin.
pub(super) type StdioTransport = AsyncRwTransport<RoleClient, LineLimited<ChildStdout>, ChildStdin>;

/// The command that starts the server, with piped stdio, killed on drop.
pub(super) fn command(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    inherit_env: &[String],
    cwd: Option<&Path>,
) -> Command {
    let mut cmd = Command::new(command);
    // hostpipe's environment holds secrets (model API keys, its API tokens, the
    // store URL with its password): a server gets the few variables the official
    // SDKs pass, those its config names, and its own `env`; nothing else.
    cmd.env_clear();
    for name in INHERITED_ENV
        .iter()
        .copied()
        .chain(inherit_env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.args(args)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    // Its own process group, so `npx`/`uvx` wrappers and their children go away
    // together on shutdown.
    #[cfg(unix)]
    cmd.process_group(0);
    cmd
}

/// Spawns `cmd` (the program `command`), hands the child and its process group to the
/// slot, drains its stderr into the log, and wraps its stdout in [`LineLimited`] at
/// `max_message_bytes`.
pub(super) fn spawn(
    slot: &Arc<Slot>,
    mut cmd: Command,
    command: &str,
    max_message_bytes: usize,
) -> Result<StdioTransport, String> {
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
    slot.set_process_group(child.id());
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(drain_stderr(Arc::clone(slot), stderr));
    }
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(format!("`{command}`: no stdio pipes"));
    };
    slot.set_child(child);
    let reader = LineLimited::new(stdout, max_message_bytes, &slot.config.name);
    // `LineLimited` enforces the limit (and fails the request); rmcp's own cap
    // would drop the line silently, so it is set out of the way.
    Ok(AsyncRwTransport::new_client(reader, stdin).with_max_line_length(usize::MAX))
}

/// Logs each stderr line (target `hostpipe_mcp::server_stderr`) and keeps the last
/// ones in the slot, until the child closes its stderr.
async fn drain_stderr(slot: Arc<Slot>, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "hostpipe_mcp::server_stderr", server = %slot.config.name, "{line}");
        slot.push_stderr(line);
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn the_command_gets_only_the_environment_it_may_see() {
        let env = BTreeMap::from([("SERVER_TOKEN".to_owned(), "t".to_owned())]);
        let inherit = ["PATH".to_owned(), "HOSTPIPE_TEST_SURELY_UNSET".to_owned()];
        let cmd = command(
            "srv",
            &["--x".to_owned()],
            &env,
            &inherit,
            Some(Path::new("/")),
        );
        let cmd = cmd.as_std();
        assert_eq!(cmd.get_program(), "srv");
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["--x"]);
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")));
        let envs: BTreeMap<&OsStr, Option<&OsStr>> = cmd.get_envs().collect();
        assert_eq!(
            envs.get(OsStr::new("SERVER_TOKEN")),
            Some(&Some(OsStr::new("t")))
        );
        assert_eq!(
            envs.get(OsStr::new("PATH")).copied().flatten(),
            std::env::var_os("PATH").as_deref()
        );
        // A name hostpipe does not have is not set to anything.
        assert!(!envs.contains_key(OsStr::new("HOSTPIPE_TEST_SURELY_UNSET")));
        // Only what was named: the inherited list, `inherit_env`, the server's `env`.
        assert!(envs.keys().all(|k| {
            INHERITED_ENV.iter().any(|n| OsStr::new(n) == *k)
                || *k == "PATH"
                || *k == "SERVER_TOKEN"
        }));
    }
}
