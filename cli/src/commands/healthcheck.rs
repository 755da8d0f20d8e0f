//! `hostpipe healthcheck`: one HTTP GET for a container's health check, so that the
//! image needs no `curl` (Dockerfile `HEALTHCHECK`, docs/deploy.md).

use std::process::ExitCode;
use std::time::Duration;

/// Where `hostpipe serve` answers by default: its liveness route on its default address
/// ([`hostpipe_cli::serve::DEFAULT_LISTEN`]).
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:8787/healthz";

// The arguments of `hostpipe healthcheck`.
#[derive(clap::Args)]
pub(crate) struct HealthcheckArgs {
    /// The URL to GET: `http://` or `https://` (no proxy is used).
    #[arg(default_value = DEFAULT_URL, value_parser = parse_http_url)]
    pub(crate) url: reqwest::Url,
    /// Time for the whole request, connection included (humantime: 500ms, 3s).
    #[arg(long, default_value = "5s", value_parser = parse_timeout)]
    pub(crate) timeout: Duration,
}

/// GETs `args.url` once: exit 0 when it answers 2xx within the timeout, printing the
/// status; exit 1 (the failure named on stderr) on any other status, a refused or
/// timed-out connection, or a broken answer. Docker's and Kubernetes' exec probes read
/// 0 as healthy and anything else as unhealthy.
///
/// # Errors
/// Only when no HTTP client can be built (exit 2).
pub(crate) async fn healthcheck(args: HealthcheckArgs) -> anyhow::Result<ExitCode> {
    let HealthcheckArgs { url, timeout } = args;
    // A container's HTTP_PROXY must not route a loopback probe through a proxy.
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .no_proxy()
        .build()?;
    match client.get(url.clone()).send().await {
        Ok(response) if response.status().is_success() => {
            outln!("{url}: {}", response.status());
            Ok(ExitCode::SUCCESS)
        }
        Ok(response) => {
            eprintln!("hostpipe healthcheck: {url} answered {}", response.status());
            Ok(ExitCode::FAILURE)
        }
        Err(e) if e.is_timeout() => {
            eprintln!(
                "hostpipe healthcheck: {url} did not answer within {}",
                humantime::format_duration(timeout)
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            // reqwest's own message is only "error sending request": the cause (refused,
            // no route) is in its source chain.
            let cause = anyhow::Error::new(e);
            eprintln!("hostpipe healthcheck: {url}: {cause:#}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The URL argument: absolute, `http` or `https`.
fn parse_http_url(s: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("`{s}` is not a URL: {e}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!("`{s}`: the scheme is `{other}`, not http or https")),
    }
}

/// `--timeout`: a humantime duration above zero and at most an hour.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("`{s}`: {e} (e.g. 500ms, 3s)"))?;
    if d.is_zero() || d > Duration::from_secs(3600) {
        return Err(format!("`{s}`: give a timeout above 0 and at most 1h"));
    }
    Ok(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_http_or_https() {
        assert_eq!(
            parse_http_url("http://127.0.0.1:8787/readyz")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8787/readyz"
        );
        assert!(parse_http_url("https://hostpipe.example/healthz").is_ok());
        let err = parse_http_url("ftp://127.0.0.1/healthz").unwrap_err();
        assert!(err.contains("scheme is `ftp`"), "{err}");
        // Without `http://`, a host name reads as a scheme and an address as no URL.
        let err = parse_http_url("localhost:8787/healthz").unwrap_err();
        assert!(err.contains("the scheme is `localhost`"), "{err}");
        let err = parse_http_url("127.0.0.1:8787/healthz").unwrap_err();
        assert!(
            err.contains("is not a URL: relative URL without a base"),
            "{err}"
        );
    }

    #[test]
    fn the_default_url_is_the_liveness_route_on_the_default_port() {
        let url = parse_http_url(DEFAULT_URL).unwrap();
        assert_eq!(url.path(), "/healthz");
        assert_eq!(
            format!("{}:{}", url.host_str().unwrap(), url.port().unwrap()),
            hostpipe_cli::serve::DEFAULT_LISTEN
        );
    }

    #[test]
    fn timeouts_are_bounded() {
        assert_eq!(parse_timeout("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_timeout("0s").unwrap_err().contains("above 0"));
        assert!(parse_timeout("2h").unwrap_err().contains("at most 1h"));
        assert!(parse_timeout("soon").unwrap_err().contains("e.g. 500ms"));
    }
}
