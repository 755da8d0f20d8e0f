//! [`ScriptedRunner`]: a runner that plays a script.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{EventSink, RunError, RunEvent, RunRequest, Runner, TokenUsage};

/// What a [`ScriptedRunner`] does on a run.
#[derive(Debug, Clone)]
pub enum Script {
    /// Streams the text in two deltas, then `message_completed` and `run_completed`.
    Answer(String),
    /// Fails with [`RunError::Backend`] and this message (reporting nothing itself: the
    /// pipeline's `ReportFailure` layer does).
    Fail(String),
    /// Waits this long, then answers `text`.
    Slow(Duration, String),
    /// Panics with this message.
    Panic(String),
}

/// A [`Runner`] that plays its [`Script`] on every run and keeps a copy of every request
/// it got ([`ScriptedRunner::requests`]): for tests of stages and pipelines that need a
/// runner but no model.
#[derive(Debug)]
pub struct ScriptedRunner {
    script: Script,
    requests: Mutex<Vec<RunRequest>>,
}

impl ScriptedRunner {
    /// A runner playing `script`.
    pub fn new(script: Script) -> Self {
        Self {
            script,
            requests: Mutex::new(Vec::new()),
        }
    }

    /// A runner answering `text`.
    pub fn answering(text: impl Into<String>) -> Self {
        Self::new(Script::Answer(text.into()))
    }

    /// The requests it got, oldest first.
    pub fn requests(&self) -> Vec<RunRequest> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Runner for ScriptedRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(request.clone());
        let text = match &self.script {
            Script::Answer(text) => text.clone(),
            Script::Slow(delay, text) => {
                tokio::time::sleep(*delay).await;
                text.clone()
            }
            Script::Fail(message) => return Err(RunError::backend(message.clone())),
            #[allow(clippy::panic)]
            Script::Panic(message) => panic!("{message}"),
        };
        let half = text.floor_char_boundary(text.len() / 2);
        for piece in [&text[..half], &text[half..]] {
            events
                .emit(RunEvent::MessageDelta {
                    text: piece.to_owned(),
                })
                .await;
        }
        events.emit(RunEvent::MessageCompleted { text }).await;
        events
            .emit(RunEvent::RunCompleted {
                usage: Some(TokenUsage {
                    input_tokens: 1,
                    output_tokens: 1,
                }),
            })
            .await;
        Ok(())
    }
}
