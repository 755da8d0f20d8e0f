//! [`Capability`]: the server capabilities hostpipe checks before it sends a request
//! (MCP spec 2025-11-25, "Lifecycle / Capability Negotiation"). A closed set: a name
//! hostpipe does not know is no capability, so it never counts as declared.

use std::str::FromStr;

use hostpipe_core::ServerCapabilities;

/// A server capability a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Capability {
    /// `resources`: `resources/list`, `resources/templates/list`, `resources/read`,
    /// `resources/subscribe`.
    Resources,
    /// `tools`: `tools/list`, `tools/call`.
    Tools,
    /// `prompts`: `prompts/list`, `prompts/get`.
    Prompts,
    /// `completions`: `completion/complete`.
    Completions,
}

impl Capability {
    /// Its key in the server's `capabilities` object, as
    /// [`hostpipe_core::SourceError::NotSupported`] names it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Resources => "resources",
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Completions => "completions",
        }
    }

    /// Whether the server declared it in `initialize`.
    pub(super) fn is_declared_in(self, declared: &ServerCapabilities) -> bool {
        match self {
            Self::Resources => declared.resources,
            Self::Tools => declared.tools,
            Self::Prompts => declared.prompts,
            Self::Completions => declared.completions,
        }
    }
}

/// A capability name hostpipe does not check for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a capability hostpipe checks")]
pub(super) struct UnknownCapability(String);

impl FromStr for Capability {
    type Err = UnknownCapability;

    /// The capability named by its key (`resources`, `tools`, `prompts`,
    /// `completions`, exactly); any other name is an error, never a capability.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "resources" => Ok(Self::Resources),
            "tools" => Ok(Self::Tools),
            "prompts" => Ok(Self::Prompts),
            "completions" => Ok(Self::Completions),
            other => Err(UnknownCapability(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Capability; 4] = [
        Capability::Resources,
        Capability::Tools,
        Capability::Prompts,
        Capability::Completions,
    ];

    fn everything() -> ServerCapabilities {
        ServerCapabilities {
            tools: true,
            resources: true,
            resources_subscribe: true,
            resources_list_changed: true,
            prompts: true,
            completions: true,
            logging: true,
        }
    }

    /// What the host's check was given a name: declared only if it is a capability and
    /// the server declared it.
    fn declared_by_name(declared: &ServerCapabilities, name: &str) -> bool {
        name.parse::<Capability>()
            .is_ok_and(|c| c.is_declared_in(declared))
    }

    #[test]
    fn each_capability_is_its_own_flag() {
        for cap in ALL {
            let mut only = ServerCapabilities::default();
            match cap {
                Capability::Resources => only.resources = true,
                Capability::Tools => only.tools = true,
                Capability::Prompts => only.prompts = true,
                Capability::Completions => only.completions = true,
            }
            for other in ALL {
                assert_eq!(
                    other.is_declared_in(&only),
                    other == cap,
                    "{other:?} with only {cap:?}"
                );
            }
            assert!(!cap.is_declared_in(&ServerCapabilities::default()));
        }
    }

    #[test]
    fn names_round_trip() {
        for cap in ALL {
            assert_eq!(cap.name().parse::<Capability>(), Ok(cap));
        }
    }

    #[test]
    fn an_unknown_name_is_not_declared() {
        // Before: the check matched on the name and let any other name through.
        for name in [
            "logging",
            "sampling",
            "resources_subscribe",
            "Tools",
            " tools",
            "",
        ] {
            assert_eq!(
                name.parse::<Capability>(),
                Err(UnknownCapability(name.to_owned()))
            );
            assert!(!declared_by_name(&everything(), name), "{name:?}");
        }
        assert!(declared_by_name(&everything(), "tools"));
    }
}
