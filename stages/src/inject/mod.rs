//! `resource_context_injection`: reads the attached resources and fits them into the
//! turn's token budget.
//!
//! 1. Attachments at pipeline scope (config) and message or conversation scope (on the
//!    [`Turn`]), static URIs or RFC 6570 templates, are resolved and de-duplicated
//!    ([`plan`]).
//! 2. The listing supplies each resource's annotations, size and MIME type. Resources
//!    whose `annotations.audience` is only `["user"]` never go to the model; MIME types
//!    outside the policy and resources over the byte limit are not read.
//! 3. Attachments are put in order: scope (message > conversation > pipeline), then
//!    `annotations.priority` (1.0 or `must = true`: must include), then `lastModified`
//!    (newer first), then attachment order. The order breaks ties; relevance decides.
//! 4. All reads run concurrently; contents are converted by MIME type ([`read`],
//!    [`convert`]).
//! 5. [`crate::fit`] fits them into the budget ([`budget`]): whole when everything
//!    fits, else the passages of all texts in one ranking against the message (and
//!    recent history). The injected total never exceeds the budget.
//!
//! [`convert`]: crate::convert

mod budget;
mod config;
mod images;
mod plan;
mod read;
mod record;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::{
    Attachment, BuildContext, ConfigError, McpSource, PassageRequest, Role, Stage, StageError,
    StageOutcome, StagePhase, Tokenizer, Turn,
};

use self::config::Options;
pub use self::config::{AttachmentConfig, InjectConfig};
use crate::config::parse_section;
use crate::fit::passages::retrieve;
use crate::fit::{FitOptions, FitOutcome, FitQuery, Item, fit};
use crate::reader::ReadPolicy;

/// How many recent user messages are looked at for the `history_messages` with terms.
const HISTORY_LOOKBACK: usize = 10;

/// Reads attached resources into [`hostpipe_core::ContextBlock`]s within a token budget.
pub struct ResourceContextInjection {
    config: InjectConfig,
    attachments: Vec<(Attachment, Options)>,
    mcp: Arc<dyn McpSource>,
    fit: FitOptions,
    /// Published in every turn's extensions, for the model's own reads.
    policy: Arc<ReadPolicy>,
}

impl ResourceContextInjection {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "resource_context_injection";

    /// The default `passage_tokens`.
    pub const PASSAGE_TOKENS: usize = config::PASSAGE_TOKENS;

    /// The default `max_passages_per_resource`.
    pub const MAX_PASSAGES: usize = config::MAX_PASSAGES;

    /// Checks `config` against the configured servers.
    ///
    /// # Errors
    /// [`ConfigError`] at `attachments[i]…` for an unknown server, neither or both of
    /// `uri` and `template`, an invalid template, a template variable without an
    /// argument or an argument the template does not have; at `budget_share` for a
    /// share outside (0, 1] or given with `budget_tokens`; at `passage_tokens` under 16;
    /// at `history_weight` outside [0, 1]; at `summarizer`, `embedder` or `reranker` for
    /// a name `ctx` does not have (the error lists the names it has).
    pub fn new(config: InjectConfig, ctx: &BuildContext) -> Result<Self, ConfigError> {
        let checked = config.check(ctx)?;
        Ok(Self {
            policy: Arc::new(config.read_policy()),
            config,
            attachments: checked.attachments,
            mcp: Arc::clone(&ctx.mcp),
            fit: checked.fit,
        })
    }

    /// Fits what was read into `budget` tokens for the turn's message and recent history.
    async fn fit_items(
        &self,
        turn: &Turn,
        items: Vec<Item>,
        budget: usize,
        tk: &Tokenizer,
    ) -> FitOutcome {
        let history = history_of(turn);
        let query = FitQuery {
            message: &turn.message.text,
            history: &history,
        };
        fit(items, budget, query, tk, &self.fit).await
    }
}

#[async_trait]
impl Stage for ResourceContextInjection {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        // The model's own reads (`read_resource`) follow the same rules.
        turn.extensions.insert(Arc::clone(&self.policy));
        // A turn that only calls a tool has no message to answer: nothing is read.
        if turn.extensions.get::<hostpipe_core::ToolsOnly>().is_some() {
            return Ok(StageOutcome::Continue);
        }
        // A retrieval (`POST /retrieval`) wants passages, not a context: no budget.
        let passages = turn.extensions.get::<Arc<PassageRequest>>().map(Arc::clone);
        let tk = Tokenizer::new(turn.model.encoding).map_err(|e| StageError::msg(e.to_string()))?;
        let budget = match &passages {
            Some(_) => usize::MAX,
            None => budget::budget(&self.config, self.mcp.as_ref(), turn, &tk).await,
        };
        if passages.is_none() {
            turn.context_budget = Some(budget);
        }

        let mut planned = plan::plan(
            turn,
            self.mcp.as_ref(),
            &self.attachments,
            self.config.strategy,
        )
        .await;
        plan::ask_consent(turn, &mut planned).await;
        let refused = plan::apply_policy(&self.policy, &mut planned);
        plan::rank(&mut planned);
        let fetched = if budget == 0 {
            turn.trace
                .warn("the resource budget is 0 tokens: nothing was read");
            Vec::new()
        } else {
            read::read_all(self.mcp.as_ref(), planned, turn.deadline).await
        };
        let mut collected = read::collect(turn, &self.policy, fetched).await;
        let resources = collected.items.len();
        if passages.is_none() {
            collected
                .items
                .extend(images::items(turn, &self.policy.limits));
        }
        let outcome = match passages {
            Some(request) => {
                let history = history_of(turn);
                let query = FitQuery {
                    message: &turn.message.text,
                    history: &history,
                };
                let found = retrieve(collected.items, query, &request, &self.fit).await;
                request.answer(found.passages);
                found.outcome
            }
            None => self.fit_items(turn, collected.items, budget, &tk).await,
        };
        let outcome = images::finish(turn, outcome, resources);
        record::finish(turn, outcome, collected.records, refused);
        Ok(StageOutcome::Continue)
    }
}

/// Recent user messages, which join the query of a follow-up, most recent first.
fn history_of(turn: &Turn) -> Vec<&str> {
    turn.history
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .take(HISTORY_LOOKBACK)
        .map(|m| m.text.as_str())
        .collect()
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: InjectConfig = parse_section(section)?;
    Ok(Box::new(ResourceContextInjection::new(config, ctx)?))
}

hostpipe_core::submit_stage! {
    name: ResourceContextInjection::NAME,
    phase: StagePhase::Context,
    priority: 0,
    description: "Reads attached MCP resources and fits them into the token budget.",
    build: build,
}
