//! The stage contract.

use async_trait::async_trait;

use crate::error::StageError;
use crate::turn::Turn;

/// What a stage decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageOutcome {
    /// Go on with the next stage.
    Continue,
    /// End the turn now and answer the user with this text (e.g. a required server is
    /// down). Later stages and the runner do not run.
    Reply(String),
}

/// One step of a pipeline. A stage reads and changes the [`Turn`] and decides whether
/// the turn goes on.
///
/// A stage should turn what it can into trace warnings and keep the turn going; it
/// returns [`StageError`] only for failures it cannot work around, which the pipeline
/// turns into a reply and a trace record.
#[async_trait]
pub trait Stage: Send + Sync {
    /// Processes the turn.
    ///
    /// # Errors
    /// [`StageError`] when the stage cannot do its job at all.
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError>;
}
