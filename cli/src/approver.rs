//! The CLI's consent [`Approver`]: asks on the controlling terminal.

use std::io::{BufRead as _, Write as _};
use std::sync::Mutex;

use async_trait::async_trait;
use hostpipe_core::{CallOrigin, ConsentRequest, ReadOrigin};
use hostpipe_engine::{Approver, ConsentAnswer};
use tokio::sync::mpsc;

/// Asks on the controlling terminal (`/dev/tty`, so it works while stdin carries the
/// message), one question at a time; denies when there is no terminal.
///
/// One reader thread reads the terminal's lines for the whole process, so a question
/// that timed out (the gate's `ask_timeout_ms`) leaves no reader behind to steal the
/// next answer, and the process can exit while it waits. Lines typed before a question
/// is shown are discarded: only an answer to the question counts.
#[derive(Debug, Default)]
pub struct TerminalApprover {
    pub(crate) lines: tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    tty: Mutex<Option<std::fs::File>>,
}

impl TerminalApprover {
    /// A terminal approver.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether there is a controlling terminal to ask on.
    pub fn has_terminal(&self) -> bool {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .is_ok()
    }

    /// Opens the terminal and starts the reader thread, once.
    pub(crate) fn open(&self, lines: &mut Option<mpsc::UnboundedReceiver<String>>) -> bool {
        if lines.is_some() {
            return true;
        }
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/tty")
        };
        let (Ok(reader), Ok(writer)) = (open(), open()) else {
            return false;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // A plain thread, not the runtime's blocking pool: the runtime would wait for
        // it at exit, and a terminal read never ends by itself.
        let spawned = std::thread::Builder::new()
            .name("hostpipe-tty".into())
            .spawn(move || {
                let mut reader = std::io::BufReader::new(reader);
                let mut line = String::new();
                while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                    if tx.send(std::mem::take(&mut line)).is_err() {
                        break;
                    }
                }
            });
        if spawned.is_err() {
            return false;
        }
        *self
            .tty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(writer);
        *lines = Some(rx);
        true
    }

    pub(crate) fn say(&self, text: &str) -> bool {
        let mut tty = self
            .tty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tty.as_mut().is_some_and(|t| {
            t.write_all(text.as_bytes())
                .and_then(|()| t.flush())
                .is_ok()
        })
    }
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, request: &ConsentRequest) -> ConsentAnswer {
        let mut lines = self.lines.lock().await;
        let what = match &request.tool {
            None => format!(
                "{} from `{}`",
                printable(&request.uri),
                printable(&request.server)
            ),
            Some(t) => format!(
                "tool `{}` of `{}` with {}",
                printable(&t.name),
                printable(&request.server),
                printable(&hostpipe_core::cap_json(&t.arguments, 600).to_string())
            ),
        };
        if !self.open(&mut lines) {
            eprintln!(
                "hostpipe: the consent policy asks about {what}, and there is no terminal to ask: denied"
            );
            return ConsentAnswer::Deny;
        }
        let Some(rx) = lines.as_mut() else {
            return ConsentAnswer::Deny;
        };
        // Type-ahead (or a late answer to a question that timed out) is not an answer.
        while rx.try_recv().is_ok() {}
        let who = match (&request.tool, request.origin) {
            (Some(t), _) => match t.caller {
                CallOrigin::Model => "The model",
                CallOrigin::Api => "An HTTP API caller",
                CallOrigin::Agent => "The remote agent",
            },
            (None, ReadOrigin::Host) => "An attachment",
            (None, ReadOrigin::Model) => "The model",
        };
        let (conversation, choices) = match &request.conversation {
            Some(c) => (
                format!(", conversation `{}`", printable(c)),
                "[o]nce, for this [c]onversation, or [N]o",
            ),
            None => (String::new(), "[o]nce or [N]o"),
        };
        let verb = if request.tool.is_some() {
            "call"
        } else {
            "read"
        };
        let question = format!(
            "\nhostpipe: {who} wants to {verb} {what} ({}; pipeline `{}`{conversation}).\nAllow? {choices}: ",
            printable(&request.reason),
            printable(&request.pipeline)
        );
        if !self.say(&question) {
            return ConsentAnswer::Deny;
        }
        let answer = match rx.recv().await {
            Some(line) => parse_answer(&line),
            None => ConsentAnswer::Deny,
        };
        match answer {
            // Without a conversation there is nothing to remember it for.
            ConsentAnswer::AllowConversation if request.conversation.is_none() => {
                ConsentAnswer::Deny
            }
            a => a,
        }
    }
}

/// `text` with control characters (ESC, CR, NUL, …) and line separators shown as
/// escapes, so that a server-chosen URI cannot redraw the question on the terminal.
pub fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = c.is_control() || c == '\u{2028}' || c == '\u{2029}';
            let shown: Vec<char> = if escape {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            shown
        })
        .collect()
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

    #[test]
    fn escapes_cannot_redraw_the_question() {
        assert_eq!(
            printable("evil://x\u{1b}[2K\r\u{1b}[1Afake"),
            "evil://x\\u{1b}[2K\\u{d}\\u{1b}[1Afake"
        );
    }
}
