//! Building pipelines from a [`LoadedConfig`]: stages and runners from the
//! [`Registry`], the consent policy, summarizers, embedders and rerankers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hostpipe_core::{BuildContext, ConfigError, McpSource, Registry, Runner, Summarizer};
use hostpipe_engine::{Consent, ConsentConfig, ConsentPolicy, Pipeline};
use hostpipe_runners::{
    HttpReranker, OpenAiEmbedder, OpenAiSummarizer, OpenAiSummarizerConfig, RetrievalServiceConfig,
};

use super::{LoadedConfig, PipelineSpec, SummarizerKind};

/// A runner chosen instead of the pipelines' own (`hostpipe run --runner`, a service
/// turn's `"runner": "preview"`), with settings (key, value) written over its section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerChoice {
    /// The runner's registered name.
    pub name: String,
    /// Settings over the pipeline's `[pipelines.ID.NAME]` section (string values).
    pub settings: Vec<(String, String)>,
}

impl RunnerChoice {
    /// Runner `name` with the pipeline's own settings for it.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            settings: Vec::new(),
        }
    }
}

/// What every pipeline of one configuration shares when built.
struct Shared {
    model: Arc<hostpipe_core::ModelProfile>,
    summarizers: BTreeMap<String, Arc<dyn Summarizer>>,
    embedders: BTreeMap<String, Arc<dyn hostpipe_core::Embedder>>,
    rerankers: BTreeMap<String, Arc<dyn hostpipe_core::Reranker>>,
}

impl LoadedConfig {
    /// Builds every pipeline with `registry`, against the servers of `mcp`, each
    /// ending in its own runner or, given `runner`, in that one.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and key: an unknown stage or runner (listing the
    /// known ones), a stage's invalid section, a section for a stage the pipeline does
    /// not list.
    pub fn build_pipelines(
        &self,
        registry: &Registry,
        mcp: Arc<dyn McpSource>,
        runner: Option<&RunnerChoice>,
    ) -> Result<BTreeMap<String, Pipeline>, ConfigError> {
        let shared = self.shared()?;
        self.pipelines
            .iter()
            .map(|(id, spec)| {
                let built = self
                    .build_one(id, spec, registry, &mcp, &shared, runner)
                    .map_err(|e| e.in_file(&self.source))?;
                Ok((id.clone(), built))
            })
            .collect()
    }

    /// Builds runner `choice` for every pipeline, from each pipeline's section for it (the
    /// service keeps one `preview` runner per pipeline this way, instead of a copy of
    /// every pipeline).
    ///
    /// # Errors
    /// An unknown runner, or a pipeline's invalid section for it.
    pub fn build_runners(
        &self,
        registry: &Registry,
        mcp: Arc<dyn McpSource>,
        choice: &RunnerChoice,
    ) -> Result<BTreeMap<String, Box<dyn Runner>>, ConfigError> {
        let shared = self.shared()?;
        self.pipelines
            .iter()
            .map(|(id, spec)| {
                let ctx = self.context(id, &mcp, &shared);
                let built = runner(registry, spec, &ctx, choice)
                    .map_err(|e| e.under(&format!("pipelines.{id}")).in_file(&self.source))?;
                Ok((id.clone(), built))
            })
            .collect()
    }

    fn shared(&self) -> Result<Shared, ConfigError> {
        let (embedders, rerankers) = self.build_retrieval()?;
        Ok(Shared {
            model: Arc::new(self.model.clone()),
            summarizers: self.build_summarizers()?,
            embedders,
            rerankers,
        })
    }

    fn context(&self, id: &str, mcp: &Arc<dyn McpSource>, shared: &Shared) -> BuildContext {
        BuildContext {
            pipeline_id: id.to_owned(),
            mcp: Arc::clone(mcp),
            model: Arc::clone(&shared.model),
            summarizers: shared.summarizers.clone(),
            embedders: shared.embedders.clone(),
            rerankers: shared.rerankers.clone(),
        }
    }

    /// One pipeline; errors are relative to the file.
    fn build_one(
        &self,
        id: &str,
        spec: &PipelineSpec,
        registry: &Registry,
        mcp: &Arc<dyn McpSource>,
        shared: &Shared,
        choice: Option<&RunnerChoice>,
    ) -> Result<Pipeline, ConfigError> {
        let at = format!("pipelines.{id}");
        let runner_name = choice.map_or(spec.runner.as_str(), |c| c.name.as_str());
        if let Some(key) = spec
            .stray_sections(&[spec.runner.as_str(), runner_name])
            .next()
        {
            return Err(ConfigError::new(
                key,
                format!(
                    "`{key}` is not a pipeline setting, a stage this pipeline lists ({}), or its runner (`{runner_name}`)",
                    spec.stages.join(", ")
                ),
            )
            .under(&at));
        }
        let consent = match &spec.consent {
            None => None,
            Some(value) => Some(
                self.consent(value, mcp.as_ref())
                    .map_err(|e| e.under(&format!("{at}.consent")))?,
            ),
        };
        let ctx = self.context(id, mcp, shared);
        let mut stages = Vec::with_capacity(spec.stages.len());
        for (i, name) in spec.stages.iter().enumerate() {
            let d = registry
                .stage(name)
                .map_err(|e| e.under(&format!("{at}.stages[{i}]")))?;
            let stage = (d.build)(spec.section(name), &ctx)
                .map_err(|e| e.under(&format!("{at}.{name}")))?;
            stages.push((name.clone(), stage));
        }
        // After the stages, so a stage's own error about a section comes first.
        spec.check_attachments_bound().map_err(|e| e.under(&at))?;
        let choice = choice
            .cloned()
            .unwrap_or_else(|| RunnerChoice::named(&spec.runner));
        let built = runner(registry, spec, &ctx, &choice).map_err(|e| e.under(&at))?;
        let mut pipeline = Pipeline::new(
            id.to_owned(),
            stages,
            (choice.name, built),
            Arc::clone(&shared.model),
            spec.system_prompt.clone(),
        )
        .with_turn_timeout(spec.turn_timeout)
        .with_messages(Arc::clone(&spec.messages));
        if let Some(c) = consent {
            pipeline = pipeline.with_consent(c);
        }
        if let Some(elicitor) = &self.elicitor
            && spec.elicitation.enabled
        {
            pipeline = pipeline.with_elicitation(Arc::clone(elicitor), spec.elicitation.settings);
        }
        Ok(pipeline)
    }

    /// `[pipelines.ID.consent]`, checked against the configured servers. Errors are
    /// relative to the section.
    fn consent(
        &self,
        value: &serde_json::Value,
        mcp: &dyn McpSource,
    ) -> Result<Arc<Consent>, ConfigError> {
        let config: ConsentConfig = hostpipe_core::parse_section(value)?;
        // A rule for a server that does not exist would silently never apply (a typo, a
        // wrong letter case): an error, like in bindings.
        let known: Vec<String> = mcp.servers().into_iter().map(|s| s.name).collect();
        for (i, rule) in config.rules.iter().enumerate() {
            if let Some(server) = &rule.server
                && !known.contains(server)
            {
                return Err(ConfigError::new(
                    format!("rules[{i}].server"),
                    format!(
                        "unknown MCP server `{server}`; configured servers: {}",
                        known.join(", ")
                    ),
                ));
            }
            // `tool` takes the server's own name; the model's `server__tool` name would
            // silently never match.
            if let Some(tool) = &rule.tool
                && let Some((prefix, own)) = tool.split_once("__")
                && known.iter().any(|s| {
                    s == prefix
                        || s.replace(
                            |c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-',
                            "_",
                        ) == prefix
                })
            {
                return Err(ConfigError::new(
                    format!("rules[{i}].tool"),
                    format!(
                        "`{tool}` is the name the model sees; a rule names the tool as its server lists it: `tool = \"{own}\"` with `server = \"{prefix}\"`"
                    ),
                ));
            }
        }
        let policy = ConsentPolicy::new(config)?;
        Ok(Arc::new(Consent::new(policy, self.approver.clone())))
    }

    /// The `[embedders.*]` and `[rerankers.*]`, built. API keys are read from the
    /// environment variables the sections name.
    #[allow(clippy::type_complexity)]
    fn build_retrieval(
        &self,
    ) -> Result<
        (
            BTreeMap<String, Arc<dyn hostpipe_core::Embedder>>,
            BTreeMap<String, Arc<dyn hostpipe_core::Reranker>>,
        ),
        ConfigError,
    > {
        let err = |at: String, m: String| ConfigError::new(at, m).in_file(&self.source);
        let service = |table: &str,
                       name: &str,
                       base_url: &str,
                       model: &str,
                       api_key_env: &Option<String>,
                       headers: &BTreeMap<String, String>,
                       timeout_ms: Option<u64>|
         -> Result<RetrievalServiceConfig, ConfigError> {
            let mut c = RetrievalServiceConfig::new(base_url, model);
            if let Some(var) = api_key_env {
                c.api_key = Some(std::env::var(var).map_err(|_| {
                    err(
                        format!("{table}.{name}.api_key_env"),
                        format!("environment variable `{var}` is not set"),
                    )
                })?);
            }
            c.headers.clone_from(headers);
            if let Some(ms) = timeout_ms {
                if ms == 0 {
                    return Err(err(
                        format!("{table}.{name}.timeout_ms"),
                        "must be at least 1 ms".into(),
                    ));
                }
                c.timeout = Duration::from_millis(ms);
            }
            Ok(c)
        };
        let mut embedders: BTreeMap<String, Arc<dyn hostpipe_core::Embedder>> = BTreeMap::new();
        for (name, e) in &self.embedders {
            let c = service(
                "embedders",
                name,
                &e.base_url,
                &e.model,
                &e.api_key_env,
                &e.headers,
                e.timeout_ms,
            )?;
            let embedder = OpenAiEmbedder::new(name.clone(), c, e.batch_size.unwrap_or(64))
                .map_err(|e| err(format!("embedders.{name}"), e.message))?;
            embedders.insert(name.clone(), Arc::new(embedder));
        }
        let mut rerankers: BTreeMap<String, Arc<dyn hostpipe_core::Reranker>> = BTreeMap::new();
        for (name, r) in &self.rerankers {
            let c = service(
                "rerankers",
                name,
                &r.base_url,
                &r.model,
                &r.api_key_env,
                &r.headers,
                r.timeout_ms,
            )?;
            let reranker = HttpReranker::new(name.clone(), c, r.api)
                .map_err(|e| err(format!("rerankers.{name}"), e.message))?;
            rerankers.insert(name.clone(), Arc::new(reranker));
        }
        Ok((embedders, rerankers))
    }

    /// The `[summarizers.*]`, built. The API key is read from the environment variable
    /// the section names (besides the embedders', rerankers' and runners' keys).
    fn build_summarizers(&self) -> Result<BTreeMap<String, Arc<dyn Summarizer>>, ConfigError> {
        let mut out: BTreeMap<String, Arc<dyn Summarizer>> = BTreeMap::new();
        for (name, s) in &self.summarizers {
            let at = |k: &str| {
                ConfigError::new(
                    format!(
                        "summarizers.{name}{}{k}",
                        if k.is_empty() { "" } else { "." }
                    ),
                    "",
                )
            };
            let err = |k: &str, m: String| {
                ConfigError {
                    message: m,
                    ..at(k)
                }
                .in_file(&self.source)
            };
            if matches!(name.as_str(), "extractive" | "none") {
                return Err(err(
                    "",
                    format!("`{name}` is a built-in summarizer name; choose another"),
                ));
            }
            let api_key = match &s.api_key_env {
                None => None,
                Some(var) => Some(std::env::var(var).map_err(|_| {
                    err(
                        "api_key_env",
                        format!("environment variable `{var}` is not set"),
                    )
                })?),
            };
            let SummarizerKind::Openai = s.kind;
            let mut config = OpenAiSummarizerConfig::new(&s.base_url, &s.model);
            config.api_key = api_key;
            config.headers.clone_from(&s.headers);
            if let Some(ms) = s.timeout_ms {
                config.timeout = Duration::from_millis(ms);
            }
            if let Some(n) = s.max_input_tokens {
                config.max_input_tokens = n;
            }
            let summarizer =
                OpenAiSummarizer::new(name.clone(), config).map_err(|e| err("", e.message))?;
            out.insert(name.clone(), Arc::new(summarizer));
        }
        Ok(out)
    }
}

/// Runner `choice` of pipeline `spec`: its section with the choice's settings written
/// over it. Errors are relative to the pipeline.
fn runner(
    registry: &Registry,
    spec: &PipelineSpec,
    ctx: &BuildContext,
    choice: &RunnerChoice,
) -> Result<Box<dyn Runner>, ConfigError> {
    let d = registry
        .runner(&choice.name)
        .map_err(|e| e.under("runner"))?;
    let mut section = spec.section(&choice.name).clone();
    if !choice.settings.is_empty() {
        if !section.is_object() {
            section = serde_json::json!({});
        }
        if let Some(map) = section.as_object_mut() {
            for (k, v) in &choice.settings {
                map.insert(k.clone(), serde_json::Value::String(v.clone()));
            }
        }
    }
    (d.build)(&section, ctx).map_err(|e| e.under(&choice.name))
}
