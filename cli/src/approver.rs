//! The CLI's consent [`Approver`]: asks on the controlling terminal.

use std::io::{BufRead as _, Write as _};

use async_trait::async_trait;
use hostpipe_core::{Approver, ConsentAnswer, ConsentRequest, ReadOrigin};

/// Asks on the controlling terminal (`/dev/tty`, so it works while stdin carries the
/// message), one question at a time; denies when there is no terminal. The gate's
/// `ask_timeout_ms` still applies: an unanswered question is a denial.
#[derive(Debug, Default)]
pub struct TerminalApprover {
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl TerminalApprover {
    /// A terminal approver.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, request: &ConsentRequest) -> ConsentAnswer {
        let _turn = self.one_at_a_time.lock().await;
        let who = match request.origin {
            ReadOrigin::Host => "An attachment",
            ReadOrigin::Model => "The model",
        };
        let conversation = request
            .conversation
            .as_deref()
            .map(|c| format!(", conversation `{c}`"))
            .unwrap_or_default();
        let question = format!(
            "\nhostpipe: {who} wants to read {} from MCP server `{}` ({}; pipeline `{}`{conversation}).\nAllow? [o]nce, for this [c]onversation, or [N]o: ",
            request.uri, request.server, request.reason, request.pipeline
        );
        let what = format!("{} from `{}`", request.uri, request.server);
        tokio::task::spawn_blocking(move || ask(&question, &what))
            .await
            .unwrap_or(ConsentAnswer::Deny)
    }
}

fn ask(question: &str, what: &str) -> ConsentAnswer {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let Ok(mut tty) = tty else {
        eprintln!(
            "hostpipe: the consent policy asks about {what}, and there is no terminal to ask: denied"
        );
        return ConsentAnswer::Deny;
    };
    if tty
        .write_all(question.as_bytes())
        .and_then(|()| tty.flush())
        .is_err()
    {
        return ConsentAnswer::Deny;
    }
    let mut line = String::new();
    if std::io::BufReader::new(tty).read_line(&mut line).is_err() {
        return ConsentAnswer::Deny;
    }
    parse_answer(&line)
}

/// `o`/`once`/`y`/`yes` allow once, `c`/`conversation` for the conversation, anything
/// else (an empty line included) denies.
fn parse_answer(line: &str) -> ConsentAnswer {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => ConsentAnswer::AllowOnce,
        "c" | "conversation" => ConsentAnswer::AllowConversation,
        _ => ConsentAnswer::Deny,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        assert_eq!(parse_answer("o\n"), ConsentAnswer::AllowOnce);
        assert_eq!(parse_answer(" Yes "), ConsentAnswer::AllowOnce);
        assert_eq!(parse_answer("c"), ConsentAnswer::AllowConversation);
        assert_eq!(parse_answer("\n"), ConsentAnswer::Deny);
        assert_eq!(parse_answer("maybe"), ConsentAnswer::Deny);
    }
}
