//! Store URLs: which backend, normalized for sqlx, described without credentials.

use std::path::Path;
use std::str::FromStr as _;

use sqlx::any::AnyConnectOptions;

use hostpipe_engine::store::StoreError;

use crate::Backend;

/// The SQLite URL of file `path`: `%`, `?` and `#` are percent-encoded so that they
/// stay part of the file name.
pub fn sqlite_url(path: &Path) -> String {
    let mut url = String::from("sqlite://");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => url.push_str("%25"),
            '?' => url.push_str("%3F"),
            '#' => url.push_str("%23"),
            c => url.push(c),
        }
    }
    url
}

/// Checks the scheme and, for a SQLite file, creates its directory and asks for the
/// file to be created (`mode=rwc`) unless the URL sets a mode.
pub(crate) fn normalize_url(url: &str) -> Result<(Backend, String), StoreError> {
    let invalid = |message: String| StoreError::Open {
        store: describe_url(url),
        message,
    };
    let scheme = url
        .split_once(':')
        .map_or(String::new(), |(s, _)| s.to_ascii_lowercase());
    // sqlx matches schemes case-sensitively; URL schemes are not (RFC 3986 §3.1).
    let url = match url.split_once(':') {
        Some((_, rest)) => format!("{scheme}:{rest}"),
        None => url.to_owned(),
    };
    let url = url.as_str();
    match scheme.as_str() {
        "postgres" | "postgresql" => Ok((Backend::Postgres, url.to_owned())),
        "sqlite" => {
            let rest = url
                .trim_start_matches("sqlite://")
                .trim_start_matches("sqlite:");
            let (path, params) = rest.split_once('?').unwrap_or((rest, ""));
            if path.is_empty() {
                return Err(invalid(
                    "the URL names no file (e.g. sqlite:/var/lib/hostpipe/hostpipe.db)".into(),
                ));
            }
            if path == ":memory:" {
                return Ok((Backend::Sqlite, url.to_owned()));
            }
            let decoded = path
                .replace("%3F", "?")
                .replace("%23", "#")
                .replace("%25", "%");
            if let Some(dir) = Path::new(&decoded).parent()
                && !dir.as_os_str().is_empty()
            {
                std::fs::create_dir_all(dir).map_err(|e| {
                    invalid(format!(
                        "cannot create the directory {}: {e}",
                        dir.display()
                    ))
                })?;
            }
            let url = if params.split('&').any(|p| p.starts_with("mode=")) {
                format!("sqlite://{path}?{params}")
            } else if params.is_empty() {
                format!("sqlite://{path}?mode=rwc")
            } else {
                format!("sqlite://{path}?{params}&mode=rwc")
            };
            Ok((Backend::Sqlite, url))
        }
        _ => Err(invalid(
            "unknown scheme: use sqlite:PATH or postgres://USER@HOST/DATABASE".into(),
        )),
    }
}

/// `url` without its password (in the authority or a `password=` parameter), for
/// messages.
pub(crate) fn describe_url(url: &str) -> String {
    let mut s = match AnyConnectOptions::from_str(url) {
        Ok(o) => {
            let mut u = o.database_url;
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            let query: Vec<(String, String)> = u
                .query_pairs()
                .map(|(k, v)| {
                    let v = if k.eq_ignore_ascii_case("password") {
                        "***".to_owned()
                    } else {
                        v.into_owned()
                    };
                    (k.into_owned(), v)
                })
                .filter(|(k, v)| !(k == "mode" && v == "rwc"))
                .collect();
            if query.is_empty() {
                u.set_query(None);
            } else {
                u.query_pairs_mut().clear().extend_pairs(query);
            }
            u.to_string()
        }
        // Unparsable (e.g. a `/` or `#` in the password): keep the scheme and the host.
        Err(_) => match (url.split_once("://"), url.rsplit_once('@')) {
            (Some((scheme, _)), Some((_, host))) => format!("{scheme}://***@{host}"),
            _ => url.split('?').next().unwrap_or(url).to_owned(),
        },
    };
    if s.ends_with('?') {
        s.pop();
    }
    s
}

/// The error with its causes ("error returned from database: relation … does not exist").
pub(crate) fn error_text(e: &sqlx::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}
