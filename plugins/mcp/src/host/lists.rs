//! The server's lists (tools, resources, resource templates, prompts): paged by hand
//! with a page cap, an item cap and repeated-cursor detection, and stored in the slot.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use hostpipe_core::SourceError;
use rmcp::ServiceError;
use rmcp::model::PaginatedRequestParams;

use super::options::HostOptions;
use super::slot::{Slot, timed};
use crate::convert;

/// Which lists to fetch.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Which {
    pub(super) tools: bool,
    /// Resources and resource templates (one `list_changed` covers both).
    pub(super) resources: bool,
    pub(super) prompts: bool,
}

impl Which {
    /// Every list.
    pub(super) const ALL: Self = Self {
        tools: true,
        resources: true,
        prompts: true,
    };
}

/// Lists what `which` asks for (only the kinds the server declares) and stores it; a
/// failed or cut listing becomes a warning and leaves the previous list in place.
pub(super) async fn refresh_lists(slot: &Slot, options: &HostOptions, which: Which) {
    let Some(peer) = slot.peer() else { return };
    let caps = slot.read().capabilities;
    let mut warnings = Vec::new();
    // One paged listing, converted; a failure or a cut becomes a warning.
    macro_rules! fetch {
        ($method:literal, $call:ident, $field:ident, $conv:path) => {{
            let p = peer.clone();
            let listed = list_paged(slot, $method, options, move |params| {
                let p = p.clone();
                async move { p.$call(params).await.map(|r| (r.$field, r.next_cursor)) }
            })
            .await;
            note_listing(&mut warnings, listed)
                .map(|v| v.into_iter().map($conv).collect::<Arc<[_]>>())
        }};
    }
    let tools = if which.tools && caps.tools {
        fetch!("tools/list", list_tools, tools, convert::tool)
    } else {
        None
    };
    let (resources, templates) = if which.resources && caps.resources {
        (
            fetch!(
                "resources/list",
                list_resources,
                resources,
                convert::resource
            ),
            fetch!(
                "resources/templates/list",
                list_resource_templates,
                resource_templates,
                convert::resource_template
            ),
        )
    } else {
        (None, None)
    };
    let prompts = if which.prompts && caps.prompts {
        fetch!("prompts/list", list_prompts, prompts, convert::prompt)
    } else {
        None
    };
    for w in &warnings {
        tracing::warn!(server = %slot.config.name, warning = %w, "MCP listing problem");
    }
    let mut st = slot.write();
    if which.tools {
        st.tools = tools.or_else(|| st.tools.take());
    }
    if which.resources {
        st.resources = resources.or_else(|| st.resources.take());
        st.templates = templates.or_else(|| st.templates.take());
    }
    if which.prompts {
        st.prompts = prompts.or_else(|| st.prompts.take());
    }
    st.warnings = warnings;
}

/// Keeps a listing's items, moving a cut or a failure into `warnings` (a server whose
/// list fails stays connected; the list is then empty).
fn note_listing<T>(
    warnings: &mut Vec<String>,
    r: Result<(Vec<T>, Option<String>), SourceError>,
) -> Option<Vec<T>> {
    match r {
        Ok((items, cut)) => {
            warnings.extend(cut);
            Some(items)
        }
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    }
}

/// Follows `nextCursor` to the end (MCP spec 2025-11-25, "Utilities / Pagination"),
/// at most `max_pages` pages, stopping at a repeated cursor. Returns the items and, when
/// the list was cut, why.
async fn list_paged<T, F, Fut>(
    slot: &Slot,
    method: &'static str,
    options: &HostOptions,
    mut page: F,
) -> Result<(Vec<T>, Option<String>), SourceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let timeout = slot.request_timeout(options);
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..options.max_list_pages.max(1) {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (mut batch, next) = match timed(slot, method, timeout, page(params)).await {
            Ok(page) => page,
            // A server that declares the capability but not this list method (e.g. a
            // low-level Python SDK server without templates) simply has none.
            Err(SourceError::Protocol { code: -32601, .. }) if cursor.is_none() => {
                tracing::debug!(server = %slot.config.name, method, "method not found; treating the list as empty");
                return Ok((Vec::new(), None));
            }
            Err(e) => return Err(e),
        };
        items.append(&mut batch);
        let max_items = options.max_list_items.max(1);
        if items.len() > max_items {
            items.truncate(max_items);
            let why = format!(
                "{method}: more than {max_items} items (max_list_items); the list was cut at {max_items}"
            );
            return Ok((items, Some(why)));
        }
        match next {
            None => return Ok((items, None)),
            Some(next) if !seen.insert(next.clone()) => {
                let why = format!(
                    "{method}: the server repeated cursor `{next}`; the list was cut at {} items",
                    items.len()
                );
                return Ok((items, Some(why)));
            }
            Some(next) => cursor = Some(next),
        }
    }
    let cut = format!(
        "{method}: more than {} pages; the list was cut at {} items",
        options.max_list_pages.max(1),
        items.len()
    );
    Ok((items, Some(cut)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::model::{ErrorCode, ErrorData};

    use super::*;
    use crate::config::ServerConfig;

    type Page = Result<(Vec<u32>, Option<String>), ServiceError>;

    fn slot() -> Slot {
        Slot::new(ServerConfig::stdio("s", "unused", Vec::<String>::new()))
    }

    /// Serves `pages` in order, whatever the cursor; past the end, an empty last page.
    fn pages(
        pages: Vec<Page>,
    ) -> impl FnMut(Option<PaginatedRequestParams>) -> std::future::Ready<Page> {
        let mut pages = pages.into_iter();
        move |_| std::future::ready(pages.next().unwrap_or(Ok((Vec::new(), None))))
    }

    fn listed(r: Result<(Vec<u32>, Option<String>), SourceError>) -> (Vec<u32>, Option<String>) {
        r.unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[tokio::test]
    async fn follows_next_cursor_to_the_end() {
        let slot = slot();
        let seen = std::sync::Mutex::new(Vec::new());
        let mut n = 0;
        let r = list_paged(&slot, "tools/list", &HostOptions::default(), |params| {
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(params.and_then(|p| p.cursor));
            n += 1;
            let next = (n < 3).then(|| format!("c{n}"));
            std::future::ready(Ok((vec![n], next)))
        })
        .await;
        assert_eq!(listed(r), (vec![1, 2, 3], None));
        assert_eq!(
            *seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            [None, Some("c1".into()), Some("c2".into())]
        );
        assert_eq!(slot.request_counts().get("tools/list"), Some(&3));
    }

    #[tokio::test]
    async fn a_repeated_cursor_cuts_the_list() {
        let again = || Ok((vec![7], Some("same".to_owned())));
        let r = list_paged(
            &slot(),
            "prompts/list",
            &HostOptions::default(),
            pages(vec![again(), again(), again()]),
        )
        .await;
        let (items, cut) = listed(r);
        assert_eq!(items, [7, 7]);
        assert!(cut.is_some_and(|w| w.contains("repeated cursor `same`")));
    }

    #[tokio::test]
    async fn the_page_cap_cuts_the_list() {
        let options = HostOptions {
            max_list_pages: 2,
            ..HostOptions::default()
        };
        let r = list_paged(
            &slot(),
            "resources/list",
            &options,
            pages(vec![
                Ok((vec![1], Some("a".into()))),
                Ok((vec![2], Some("b".into()))),
                Ok((vec![3], None)),
            ]),
        )
        .await;
        let (items, cut) = listed(r);
        assert_eq!(items, [1, 2]);
        assert!(cut.is_some_and(|w| w.contains("more than 2 pages")));
    }

    #[tokio::test]
    async fn the_item_cap_cuts_the_list() {
        let options = HostOptions {
            max_list_items: 4,
            ..HostOptions::default()
        };
        let r = list_paged(
            &slot(),
            "tools/list",
            &options,
            pages(vec![
                Ok((vec![1, 2, 3], Some("a".into()))),
                Ok((vec![4, 5, 6], None)),
            ]),
        )
        .await;
        let (items, cut) = listed(r);
        assert_eq!(items, [1, 2, 3, 4]);
        assert!(cut.is_some_and(|w| w.contains("more than 4 items")));
    }

    fn method_not_found() -> ServiceError {
        ServiceError::McpError(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, "no", None))
    }

    #[tokio::test]
    async fn method_not_found_on_the_first_page_is_an_empty_list() {
        let r = list_paged(
            &slot(),
            "resources/templates/list",
            &HostOptions::default(),
            pages(vec![Err(method_not_found())]),
        )
        .await;
        assert_eq!(listed(r), (Vec::new(), None));
    }

    #[tokio::test]
    async fn method_not_found_on_a_later_page_is_an_error() {
        let r = list_paged(
            &slot(),
            "resources/list",
            &HostOptions::default(),
            pages(vec![
                Ok((vec![1], Some("a".into()))),
                Err(method_not_found()),
            ]),
        )
        .await;
        assert!(matches!(r, Err(SourceError::Protocol { code: -32601, .. })));
    }

    #[tokio::test]
    async fn a_page_that_never_comes_times_out() {
        let options = HostOptions {
            request_timeout: Duration::from_millis(20),
            ..HostOptions::default()
        };
        let r = list_paged(&slot(), "tools/list", &options, |_| {
            std::future::pending::<Page>()
        })
        .await;
        assert!(
            matches!(r, Err(SourceError::Timeout { ref operation, .. }) if operation == "tools/list")
        );
    }

    #[test]
    fn a_failed_or_cut_listing_becomes_a_warning() {
        let mut warnings = Vec::new();
        assert_eq!(
            note_listing(&mut warnings, Ok((vec![1], None))),
            Some(vec![1])
        );
        assert_eq!(
            note_listing(&mut warnings, Ok((vec![2], Some("cut".into())))),
            Some(vec![2])
        );
        let failed: Result<(Vec<u32>, Option<String>), _> = Err(SourceError::Timeout {
            server: "s".into(),
            operation: "tools/list".into(),
            timeout: Duration::from_secs(1),
        });
        assert_eq!(note_listing(&mut warnings, failed), None);
        assert_eq!(warnings.len(), 2);
        assert_eq!(warnings[0], "cut");
        assert!(warnings[1].contains("tools/list"));
    }

    #[test]
    fn which_is_none_by_default_and_all_when_asked() {
        let none = Which::default();
        assert!(!none.tools && !none.resources && !none.prompts);
        let all = Which::ALL;
        assert!(all.tools && all.resources && all.prompts);
    }
}
