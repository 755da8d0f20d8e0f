//! The registry of stages and runners that crates submit with [`inventory`].
//!
//! A crate registers a stage with [`submit_stage!`](crate::submit_stage) and a runner
//! with [`submit_runner!`](crate::submit_runner). [`Registry::from_inventory`] gathers
//! every submission linked into the binary, sorts them deterministically (inventory's
//! own order is unspecified) and rejects duplicate names, naming both crates.
//! [`Registry::new`] takes an explicit list, so tests need no global state.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::model::ModelProfile;
use crate::run::Runner;
use crate::source::McpSource;
use crate::stage::Stage;
use crate::summarize::Summarizer;

/// Where a stage belongs in a turn. Pipelines list stages explicitly; the phase orders
/// the registry's listing and documents intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StagePhase {
    /// Decides what the turn may use (servers, permissions).
    Bind,
    /// Rewrites the incoming message (e.g. prompt expansion).
    Expand,
    /// Collects context for the model.
    Context,
    /// Assembles tools.
    Tools,
    /// Last checks and rewrites before the runner.
    Finish,
}

impl StagePhase {
    /// The phase's name, e.g. `context`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bind => "bind",
            Self::Expand => "expand",
            Self::Context => "context",
            Self::Tools => "tools",
            Self::Finish => "finish",
        }
    }
}

/// What builders get besides their own config section.
#[derive(Clone)]
pub struct BuildContext {
    /// The pipeline being built.
    pub pipeline_id: String,
    /// The MCP servers (possibly still connecting).
    pub mcp: Arc<dyn McpSource>,
    /// The pipeline's model.
    pub model: Arc<ModelProfile>,
    /// Summarizers configured by name (besides the built-in `extractive`).
    pub summarizers: BTreeMap<String, Arc<dyn Summarizer>>,
    /// Embedders configured by name (`[embedders.NAME]`).
    pub embedders: BTreeMap<String, Arc<dyn crate::Embedder>>,
    /// Rerankers configured by name (`[rerankers.NAME]`).
    pub rerankers: BTreeMap<String, Arc<dyn crate::Reranker>>,
}

/// Deserializes a stage's or runner's config section into its typed config; `null` (the
/// pipeline gives no section) means the defaults. Give the type
/// `#[serde(deny_unknown_fields)]` so a misspelt key is an error, not a silent default.
///
/// # Errors
/// A [`ConfigError`] whose key is the path inside the section where deserialization
/// stopped (e.g. `attachments[0].uri`), with serde's message; the pipeline builder adds
/// the section's own path and the file.
pub fn parse_section<T: serde::de::DeserializeOwned + Default>(
    section: &serde_json::Value,
) -> Result<T, ConfigError> {
    if section.is_null() {
        return Ok(T::default());
    }
    serde_path_to_error::deserialize(section).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." { String::new() } else { path };
        ConfigError::new(key, e.into_inner().to_string())
    })
}

/// Builds a stage from its config section (`null` when the pipeline gives none).
/// Errors carry the key inside the section; the caller adds the section path and file.
pub type StageBuilder =
    fn(&serde_json::Value, &BuildContext) -> Result<Box<dyn Stage>, ConfigError>;

/// Builds a runner from its config section.
pub type RunnerBuilder =
    fn(&serde_json::Value, &BuildContext) -> Result<Box<dyn Runner>, ConfigError>;

/// A registered stage.
#[derive(Debug)]
pub struct StageDescriptor {
    /// Unique name, `snake_case`; pipelines list stages by it.
    pub name: &'static str,
    /// Phase.
    pub phase: StagePhase,
    /// Order within the phase in listings (lower first).
    pub priority: i32,
    /// One line for users.
    pub description: &'static str,
    /// The builder.
    pub build: StageBuilder,
    /// The crate that registered it (filled in by [`submit_stage!`](crate::submit_stage)).
    pub crate_name: &'static str,
}

/// A registered runner.
#[derive(Debug)]
pub struct RunnerDescriptor {
    /// Unique name; pipelines name their runner by it.
    pub name: &'static str,
    /// One line for users.
    pub description: &'static str,
    /// The builder.
    pub build: RunnerBuilder,
    /// The crate that registered it (filled in by [`submit_runner!`](crate::submit_runner)).
    pub crate_name: &'static str,
}

inventory::collect!(StageDescriptor);
inventory::collect!(RunnerDescriptor);

/// Registers a stage. Fields are those of [`StageDescriptor`] except `crate_name`.
///
/// ```ignore
/// hostpipe_core::submit_stage! {
///     name: "my_stage",
///     phase: hostpipe_core::StagePhase::Context,
///     priority: 0,
///     description: "Does one thing.",
///     build: my_builder,
/// }
/// ```
#[macro_export]
macro_rules! submit_stage {
    ($($field:ident : $value:expr),* $(,)?) => {
        $crate::__inventory::submit! {
            $crate::StageDescriptor { $($field: $value,)* crate_name: env!("CARGO_PKG_NAME") }
        }
    };
}

/// Registers a runner. Fields are those of [`RunnerDescriptor`] except `crate_name`.
#[macro_export]
macro_rules! submit_runner {
    ($($field:ident : $value:expr),* $(,)?) => {
        $crate::__inventory::submit! {
            $crate::RunnerDescriptor { $($field: $value,)* crate_name: env!("CARGO_PKG_NAME") }
        }
    };
}

/// Two registrations share a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} `{name}` is registered twice: by crate `{first_crate}` and by crate `{second_crate}`"
)]
pub struct RegistryError {
    /// `stage` or `runner`.
    pub kind: &'static str,
    /// The shared name.
    pub name: &'static str,
    /// One crate.
    pub first_crate: &'static str,
    /// The other.
    pub second_crate: &'static str,
}

/// The known stages and runners, sorted: stages by (phase, priority, name), runners by
/// name.
#[derive(Debug, Clone)]
pub struct Registry {
    stages: BTreeMap<&'static str, &'static StageDescriptor>,
    stage_order: Vec<&'static StageDescriptor>,
    runners: BTreeMap<&'static str, &'static RunnerDescriptor>,
}

impl Registry {
    /// A registry of exactly these descriptors.
    ///
    /// # Errors
    /// [`RegistryError`] when two share a name.
    pub fn new(
        stages: impl IntoIterator<Item = &'static StageDescriptor>,
        runners: impl IntoIterator<Item = &'static RunnerDescriptor>,
    ) -> Result<Self, RegistryError> {
        let mut by_name = BTreeMap::new();
        for d in stages {
            if let Some(prev) = by_name.insert(d.name, d) {
                return Err(duplicate("stage", prev.name, prev.crate_name, d.crate_name));
            }
        }
        let mut runners_by_name = BTreeMap::new();
        for d in runners {
            if let Some(prev) = runners_by_name.insert(d.name, d) {
                return Err(duplicate(
                    "runner",
                    prev.name,
                    prev.crate_name,
                    d.crate_name,
                ));
            }
        }
        let mut stage_order: Vec<_> = by_name.values().copied().collect();
        stage_order.sort_by_key(|d| (d.phase, d.priority, d.name));
        Ok(Self {
            stages: by_name,
            stage_order,
            runners: runners_by_name,
        })
    }

    /// A registry of every descriptor submitted by a crate linked into this binary.
    ///
    /// # Errors
    /// [`RegistryError`] when two share a name.
    pub fn from_inventory() -> Result<Self, RegistryError> {
        Self::new(
            inventory::iter::<StageDescriptor>,
            inventory::iter::<RunnerDescriptor>,
        )
    }

    /// Stages in registry order.
    pub fn stages(&self) -> &[&'static StageDescriptor] {
        &self.stage_order
    }

    /// Runners sorted by name.
    pub fn runners(&self) -> impl Iterator<Item = &'static RunnerDescriptor> + '_ {
        self.runners.values().copied()
    }

    /// The stage named `name`.
    ///
    /// # Errors
    /// A [`ConfigError`] (with an empty key) listing the known stages.
    pub fn stage(&self, name: &str) -> Result<&'static StageDescriptor, ConfigError> {
        self.stages.get(name).copied().ok_or_else(|| {
            let known: Vec<_> = self.stage_order.iter().map(|d| d.name).collect();
            ConfigError::new(
                "",
                format!("unknown stage `{name}`; known stages: {}", known.join(", ")),
            )
        })
    }

    /// The runner named `name`.
    ///
    /// # Errors
    /// A [`ConfigError`] (with an empty key) listing the known runners.
    pub fn runner(&self, name: &str) -> Result<&'static RunnerDescriptor, ConfigError> {
        self.runners.get(name).copied().ok_or_else(|| {
            let known: Vec<_> = self.runners.keys().copied().collect();
            ConfigError::new(
                "",
                format!(
                    "unknown runner `{name}`; known runners: {}",
                    known.join(", ")
                ),
            )
        })
    }

    /// One line per stage and runner, in registry order:
    /// `stage NAME phase=PHASE priority=N crate=CRATE` then `runner NAME crate=CRATE`.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for d in &self.stage_order {
            let _ = writeln!(
                out,
                "stage {} phase={} priority={} crate={}",
                d.name,
                d.phase.as_str(),
                d.priority,
                d.crate_name
            );
        }
        for d in self.runners.values() {
            let _ = writeln!(out, "runner {} crate={}", d.name, d.crate_name);
        }
        out
    }
}

fn duplicate(
    kind: &'static str,
    name: &'static str,
    first_crate: &'static str,
    second_crate: &'static str,
) -> RegistryError {
    RegistryError {
        kind,
        name,
        first_crate,
        second_crate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_build(_: &serde_json::Value, _: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
        Err(ConfigError::new("", "not buildable in this test"))
    }

    static A: StageDescriptor = StageDescriptor {
        name: "a",
        phase: StagePhase::Tools,
        priority: 0,
        description: "",
        build: no_build,
        crate_name: "crate-one",
    };
    static B: StageDescriptor = StageDescriptor {
        name: "b",
        phase: StagePhase::Bind,
        priority: 5,
        description: "",
        build: no_build,
        crate_name: "crate-one",
    };
    static A_AGAIN: StageDescriptor = StageDescriptor {
        name: "a",
        phase: StagePhase::Bind,
        priority: 0,
        description: "",
        build: no_build,
        crate_name: "crate-two",
    };

    #[test]
    fn orders_by_phase_then_priority_then_name() {
        let r = Registry::new([&A, &B], []).unwrap_or_else(|e| unreachable!("{e}"));
        let names: Vec<_> = r.stages().iter().map(|d| d.name).collect();
        assert_eq!(names, ["b", "a"]);
    }

    #[test]
    fn duplicate_names_both_crates() {
        let err = Registry::new([&A, &A_AGAIN], []).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("stage `a` is registered twice: by crate `crate-one` and by crate `crate-two`")
        );
    }

    #[test]
    fn unknown_stage_lists_known_ones() {
        let r = Registry::new([&A, &B], []).unwrap_or_else(|e| unreachable!("{e}"));
        let e = r.stage("c").err().map(|e| e.message);
        assert_eq!(e.as_deref(), Some("unknown stage `c`; known stages: b, a"));
    }
}
