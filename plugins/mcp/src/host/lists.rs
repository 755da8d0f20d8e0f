//! The server's lists (tools, resources, resource templates, prompts): paged by hand
//! with a page cap, an item cap and repeated-cursor detection, and stored in the slot
//! with how long each stays fresh ([`ListExpiry`]).
//!
//! [`ListExpiry`]: super::slot::ListExpiry

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hostpipe_core::SourceError;
use rmcp::ServiceError;
use rmcp::model::PaginatedRequestParams;

use super::options::HostOptions;
use super::slot::{ListExpiry, Slot, Which, timed};
use crate::convert;

/// The kinds of `which` whose lists are past their TTL at `now`.
pub(super) fn expired(expiry: &ListExpiry, which: Which, now: Instant) -> Which {
    let past = |at: Option<Instant>| at.is_some_and(|at| at <= now);
    Which {
        tools: which.tools && past(expiry.tools),
        resources: which.resources && past(expiry.resources),
        prompts: which.prompts && past(expiry.prompts),
    }
}

impl Which {
    /// Whether it names no list.
    pub(super) fn is_empty(self) -> bool {
        !(self.tools || self.resources || self.prompts)
    }

    /// Whether it names every list `other` names.
    pub(super) fn covers(self, other: Self) -> bool {
        (self.tools || !other.tools)
            && (self.resources || !other.resources)
            && (self.prompts || !other.prompts)
    }
}

/// Lists what `which` asks for (only the kinds the server declares) and stores it with
/// its [`ListExpiry`]; a failed or cut listing becomes a warning and leaves the previous
/// list in place.
pub(super) async fn refresh_lists(slot: &Slot, options: &HostOptions, which: Which) {
    let Some(peer) = slot.peer() else { return };
    let (caps, notifies) = {
        let st = slot.read();
        (st.capabilities, st.notifies)
    };
    let modern = slot.is_modern();
    let mut warnings = Vec::new();
    // One paged listing, converted, with its TTL; a failure or a cut becomes a warning.
    macro_rules! fetch {
        ($method:literal, $call:ident, $field:ident, $conv:path) => {{
            let p = peer.clone();
            let listed = list_paged(slot, $method, options, move |params| {
                let p = p.clone();
                async move {
                    p.$call(params).await.map(|r| Page {
                        items: r.$field,
                        next: r.next_cursor,
                        ttl_ms: r.ttl_ms,
                    })
                }
            })
            .await;
            note_listing(&mut warnings, listed)
                .map(|(v, ttl)| (v.into_iter().map($conv).collect::<Arc<[_]>>(), ttl))
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
    let now = Instant::now();
    // Kept until notified, or for the TTL of the listing (a failed one keeps its expiry:
    // the next need tries again).
    // At least `min_list_ttl`; a TTL past what an `Instant` holds never expires.
    let floor = u64::try_from(options.min_list_ttl.as_millis()).unwrap_or(u64::MAX);
    let until = |notified: bool, ttl_ms: u64| {
        if modern && !notified {
            now.checked_add(Duration::from_millis(ttl_ms.max(floor)))
        } else {
            None
        }
    };
    let mut st = slot.write();
    if let Some((list, ttl)) = tools {
        st.tools = Some(list);
        st.expiry.tools = until(notifies.tools_list_changed, ttl);
    }
    match (resources, templates) {
        (Some((list, ttl)), Some((templates, templates_ttl))) => {
            st.resources = Some(list);
            st.templates = Some(templates);
            st.expiry.resources = until(notifies.resources_list_changed, ttl.min(templates_ttl));
        }
        (resources, templates) => {
            // One of the two failed: keep what came, and try both again next time.
            if let Some((list, _)) = resources {
                st.resources = Some(list);
            }
            if let Some((list, _)) = templates {
                st.templates = Some(list);
            }
        }
    }
    if let Some((list, ttl)) = prompts {
        st.prompts = Some(list);
        st.expiry.prompts = until(notifies.prompts_list_changed, ttl);
    }
    st.warnings = warnings;
}

/// One page of a list result.
pub(super) struct Page<T> {
    pub(super) items: Vec<T>,
    /// `nextCursor`.
    pub(super) next: Option<String>,
    /// `ttlMs` (2026-07-28; absent before).
    pub(super) ttl_ms: Option<u64>,
}

impl<T> From<(Vec<T>, Option<String>)> for Page<T> {
    fn from((items, next): (Vec<T>, Option<String>)) -> Self {
        Self {
            items,
            next,
            ttl_ms: None,
        }
    }
}

/// A whole listing: its items, why it was cut (if it was), and the shortest `ttlMs` of
/// its pages in ms (a page without one counts as 0; a method the server does not have,
/// `u64::MAX`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Listing<T> {
    pub(super) items: Vec<T>,
    pub(super) cut: Option<String>,
    pub(super) ttl_ms: u64,
}

/// Keeps a listing's items and TTL, moving a cut or a failure into `warnings` (a server
/// whose list fails stays connected; the list is then empty).
fn note_listing<T>(
    warnings: &mut Vec<String>,
    r: Result<Listing<T>, SourceError>,
) -> Option<(Vec<T>, u64)> {
    match r {
        Ok(listing) => {
            warnings.extend(listing.cut);
            Some((listing.items, listing.ttl_ms))
        }
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    }
}

/// Follows `nextCursor` to the end (MCP spec 2025-11-25, "Utilities / Pagination"),
/// at most `max_pages` pages, stopping at a repeated cursor. Returns the items, why the
/// list was cut (when it was) and its TTL.
async fn list_paged<T, F, Fut>(
    slot: &Slot,
    method: &'static str,
    options: &HostOptions,
    mut page: F,
) -> Result<Listing<T>, SourceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<Page<T>, ServiceError>>,
{
    let timeout = slot.request_timeout(options);
    let mut items = Vec::new();
    let mut ttl_ms = u64::MAX;
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    let done = |items, cut, ttl_ms| Ok(Listing { items, cut, ttl_ms });
    for _ in 0..options.max_list_pages.max(1) {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let mut got = match timed(slot, method, timeout, page(params)).await {
            Ok(page) => page,
            // A server that declares the capability but not this list method (e.g. a
            // low-level Python SDK server without templates) simply has none.
            Err(SourceError::Protocol { code: -32601, .. }) if cursor.is_none() => {
                tracing::debug!(server = %slot.config.name, method, "method not found; treating the list as empty");
                // For as long as the connection lasts.
                return done(Vec::new(), None, u64::MAX);
            }
            Err(e) => return Err(e),
        };
        ttl_ms = ttl_ms.min(got.ttl_ms.unwrap_or(0));
        items.append(&mut got.items);
        let max_items = options.max_list_items.max(1);
        if items.len() > max_items {
            items.truncate(max_items);
            let why = format!(
                "{method}: more than {max_items} items (max_list_items); the list was cut at {max_items}"
            );
            return done(items, Some(why), ttl_ms);
        }
        match got.next {
            None => return done(items, None, ttl_ms),
            Some(next) if !seen.insert(next.clone()) => {
                let why = format!(
                    "{method}: the server repeated cursor `{next}`; the list was cut at {} items",
                    items.len()
                );
                return done(items, Some(why), ttl_ms);
            }
            Some(next) => cursor = Some(next),
        }
    }
    let cut = format!(
        "{method}: more than {} pages; the list was cut at {} items",
        options.max_list_pages.max(1),
        items.len()
    );
    done(items, Some(cut), ttl_ms)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::model::{ErrorCode, ErrorData};

    use super::*;
    use crate::config::ServerConfig;

    type Answer = Result<Page<u32>, ServiceError>;
    /// A page as items and next cursor.
    type Plain = Result<(Vec<u32>, Option<String>), ServiceError>;

    fn slot() -> Slot {
        Slot::new(ServerConfig::stdio("s", "unused", Vec::<String>::new()))
    }

    /// Serves `pages` in order, whatever the cursor; past the end, an empty last page.
    fn pages(
        pages: Vec<Plain>,
    ) -> impl FnMut(Option<PaginatedRequestParams>) -> std::future::Ready<Answer> {
        let mut pages = pages.into_iter();
        move |_| {
            let page = pages.next().unwrap_or(Ok((Vec::new(), None)));
            std::future::ready(page.map(Page::from))
        }
    }

    fn listed(r: Result<Listing<u32>, SourceError>) -> (Vec<u32>, Option<String>) {
        let listing = r.unwrap_or_else(|e| unreachable!("{e}"));
        (listing.items, listing.cut)
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
            std::future::ready(Ok(Page {
                items: vec![n],
                next,
                ttl_ms: Some(1000 * u64::from(n)),
            }))
        })
        .await;
        // The shortest TTL of the pages holds for the whole list.
        assert_eq!(r.as_ref().map(|l| l.ttl_ms).unwrap_or_default(), 1000);
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
        let listing = r.unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!((listing.items, listing.cut), (Vec::new(), None));
        assert_eq!(listing.ttl_ms, u64::MAX);
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
            std::future::pending::<Answer>()
        })
        .await;
        assert!(
            matches!(r, Err(SourceError::Timeout { ref operation, .. }) if operation == "tools/list")
        );
    }

    #[test]
    fn a_failed_or_cut_listing_becomes_a_warning() {
        let mut warnings = Vec::new();
        let listing = |items: Vec<u32>, cut: Option<&str>| {
            Ok(Listing {
                items,
                cut: cut.map(str::to_owned),
                ttl_ms: 5,
            })
        };
        assert_eq!(
            note_listing(&mut warnings, listing(vec![1], None)),
            Some((vec![1], 5))
        );
        assert_eq!(
            note_listing(&mut warnings, listing(vec![2], Some("cut"))),
            Some((vec![2], 5))
        );
        let failed: Result<Listing<u32>, _> = Err(SourceError::Timeout {
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
        assert!(none.is_empty());
        let all = Which::ALL;
        assert!(all.tools && all.resources && all.prompts);
        assert!(!all.is_empty());
    }

    #[test]
    fn a_list_expires_at_its_ttl_and_never_without_one() {
        let now = Instant::now();
        let expiry = ListExpiry {
            tools: Some(now),
            resources: Some(now + Duration::from_secs(60)),
            prompts: None,
        };
        let now_expired = expired(&expiry, Which::ALL, now);
        assert!(now_expired.tools && !now_expired.resources && !now_expired.prompts);
        let later = expired(&expiry, Which::ALL, now + Duration::from_secs(61));
        assert!(later.tools && later.resources && !later.prompts);
        // Only what was asked about.
        let prompts_only = Which {
            prompts: true,
            ..Which::default()
        };
        assert!(expired(&expiry, prompts_only, now + Duration::from_secs(3600)).is_empty());
        assert!(Which::ALL.covers(prompts_only) && !prompts_only.covers(Which::TOOLS));
    }
}
