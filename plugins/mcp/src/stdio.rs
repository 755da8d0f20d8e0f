//! The stdio transport's reader, with a message-size limit that fails the request
//! instead of hanging it.
//!
//! rmcp's stdio transport drops a line over its 16 MiB cap with only a log line, so the
//! request it answered never completes (rmcp 3.11, `AsyncRwTransport`). hostpipe spawns
//! the server itself and puts [`LineLimited`] between the child's stdout and rmcp: a
//! line over the limit is never buffered whole; its top-level `"id"` is picked out as it
//! streams past, and rmcp is handed a JSON-RPC error response for that id instead
//! (MCP spec 2025-11-25, "Base Protocol": responses carry the request's id). The
//! request then fails at once with an error that names the limit.
//!
//! The stdio transport says stdout carries MCP messages only (MCP spec, "Transports",
//! stdio). A server that writes a banner there anyway would lose hostpipe's first
//! answer: a banner without a newline is glued to the next message, which no longer
//! parses, and the connection waits out its timeout. [`LineLimited`] passes on only
//! what can be a JSON-RPC message: text before a line's first `{` or `[` is cut off,
//! a line with neither is dropped, and each time a warning quotes what the server
//! wrote (at most 200 bytes) and says that stdout is for MCP messages only.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// JSON-RPC "internal error", used for the substitute response.
const INTERNAL_ERROR: i32 = -32603;

/// Finds the value of the top-level `"id"` member of a JSON-RPC message fed to it in
/// pieces, without keeping the message, and whether it has a top-level `"method"` (a
/// request or notification from the server, whose id is the server's own).
#[derive(Default)]
struct IdScanner {
    depth: u32,
    in_string: bool,
    escape: bool,
    expect_key: bool,
    in_key: bool,
    /// The current top-level key, up to one byte longer than the longest one we need.
    key: Vec<u8>,
    key_is_id: bool,
    capturing: bool,
    value: Vec<u8>,
    id: Option<String>,
    has_method: bool,
}

impl IdScanner {
    const MAX_ID_BYTES: usize = 256;
    const MAX_KEY: usize = b"method".len() + 1;

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    /// The id of a response (a message with an id and no method).
    fn response_id(&self) -> Option<&str> {
        self.id.as_deref().filter(|_| !self.has_method)
    }

    fn step(&mut self, b: u8) {
        if self.capturing && self.capture(b) {
            return;
        }
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.in_key {
                    self.in_key = false;
                    self.key_is_id = self.key == b"id";
                    self.has_method |= self.key == b"method";
                }
                return;
            }
            if self.in_key && self.key.len() < Self::MAX_KEY {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.in_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = b == b'{';
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.key_is_id = false;
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                if self.key_is_id && self.id.is_none() {
                    self.capturing = true;
                    self.value.clear();
                }
            }
            _ => {}
        }
    }

    /// One byte of the `"id"` value; `false` when the byte ends the value (or shows it
    /// is not a scalar) and must be read as structure too.
    fn capture(&mut self, b: u8) -> bool {
        if self.value.len() > Self::MAX_ID_BYTES {
            self.capturing = false;
            return false;
        }
        if self.in_string {
            self.value.push(b);
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return true;
        }
        let started = !self.value.is_empty();
        match b {
            // An object or array is not an id; the structure scan takes it from here.
            b'{' | b'[' if !started => {
                self.capturing = false;
                false
            }
            b'"' if !started => {
                self.in_string = true;
                self.value.push(b);
                true
            }
            b',' | b'}' | b']' => {
                self.capturing = false;
                let raw = std::str::from_utf8(&self.value).unwrap_or("");
                // Only a JSON number or string is a request id.
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(raw)
                    && (v.is_number() || v.is_string())
                {
                    self.id = Some(raw.to_owned());
                }
                false
            }
            b' ' | b'\t' | b'\r' => true,
            _ => {
                self.value.push(b);
                true
            }
        }
    }
}

/// Passes a child's stdout through line by line; see the module documentation.
pub(crate) struct LineLimited<R> {
    inner: R,
    limit: usize,
    server: String,
    /// The line being read, while it is within the limit.
    line: Vec<u8>,
    /// An over-limit line being skipped, and its length so far.
    skipping: Option<(IdScanner, usize)>,
    /// Bytes ready for the reader.
    out: Vec<u8>,
    out_pos: usize,
    scratch: Box<[u8]>,
    eof: bool,
}

impl<R> LineLimited<R> {
    /// Lines over `limit` bytes (without the newline) are replaced.
    pub(crate) fn new(inner: R, limit: usize, server: &str) -> Self {
        Self {
            inner,
            limit,
            server: server.to_owned(),
            line: Vec::new(),
            skipping: None,
            out: Vec::new(),
            out_pos: 0,
            scratch: vec![0; 64 * 1024].into_boxed_slice(),
            eof: false,
        }
    }

    fn take_in(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match newline {
                Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
                None => (bytes, None),
            };
            if let Some((scanner, len)) = &mut self.skipping {
                scanner.feed(part);
                *len += part.len();
            } else if self.line.len() + part.len() > self.limit {
                let mut scanner = IdScanner::default();
                scanner.feed(&self.line);
                scanner.feed(part);
                let len = self.line.len() + part.len();
                self.line = Vec::new();
                self.skipping = Some((scanner, len));
            } else {
                self.line.extend_from_slice(part);
            }
            match rest {
                Some(rest) => {
                    self.end_line();
                    bytes = rest;
                }
                None => break,
            }
        }
    }

    fn end_line(&mut self) {
        match self.skipping.take() {
            Some((scanner, len)) => {
                tracing::warn!(server = %self.server, bytes = len, limit = self.limit, "dropped an MCP message over the message size limit");
                if let Some(id) = scanner.response_id() {
                    let message = format!(
                        "hostpipe: the server's answer was {len} bytes, over the {}-byte message limit (max_message_bytes); it was dropped",
                        self.limit
                    );
                    let error = serde_json::json!({"code": INTERNAL_ERROR, "message": message});
                    self.out.extend_from_slice(
                        format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#).as_bytes(),
                    );
                    self.out.push(b'\n');
                }
            }
            None => {
                let mut line = std::mem::take(&mut self.line);
                if !self.strip_non_json(&mut line) {
                    return;
                }
                if self.out.is_empty() {
                    self.out = line;
                    self.out_pos = 0;
                } else {
                    self.out.append(&mut line);
                }
                self.out.push(b'\n');
            }
        }
    }
}

impl<R> LineLimited<R> {
    /// Cuts what cannot be part of a JSON-RPC message off the front of `line` (a banner,
    /// a log line), with a warning quoting it; `false` when nothing is left to pass on.
    fn strip_non_json(&self, line: &mut Vec<u8>) -> bool {
        let start = line
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(line.len());
        if line.get(start).is_none_or(|b| matches!(b, b'{' | b'[')) {
            return start < line.len() || line.is_empty();
        }
        let json = line.iter().position(|b| matches!(b, b'{' | b'['));
        let junk = &line[..json.unwrap_or(line.len())];
        let text = String::from_utf8_lossy(junk);
        let quoted = text.trim();
        let quoted = &quoted[..quoted.floor_char_boundary(200)];
        tracing::warn!(
            server = %self.server,
            wrote = quoted,
            "the server wrote text that is not an MCP message on stdout; stdout is for MCP messages only (write logs to stderr): {}",
            if json.is_some() { "it was cut off the message after it" } else { "it was dropped" }
        );
        match json {
            Some(i) => {
                line.drain(..i);
                true
            }
            None => false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimited<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut scratch = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut scratch) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = scratch.filled().len();
                    if n == 0 {
                        this.eof = true;
                        if !this.line.is_empty() || this.skipping.is_some() {
                            this.end_line();
                        }
                        continue;
                    }
                    let scratch = std::mem::take(&mut this.scratch);
                    this.take_in(&scratch[..n]);
                    this.scratch = scratch;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;

    fn id_of(json: &str) -> Option<String> {
        let mut s = IdScanner::default();
        for piece in json.as_bytes().chunks(3) {
            s.feed(piece);
        }
        s.response_id().map(str::to_owned)
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is() {
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":7,"result":{"id":9}}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            id_of(r#"{"result":{"contents":[{"id":1,"text":"\"id\":3,"}]},"jsonrpc":"2.0","id":"a\"b"}"#)
                .as_deref(),
            Some(r#""a\"b""#)
        );
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","method":"x","params":{"id":1}}"#),
            None
        );
        assert_eq!(id_of(r#"{"idx":1,"id" : 12 }"#).as_deref(), Some("12"));
        // A request from the server carries the server's own id: not ours to fail.
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#), None);
        assert_eq!(id_of(r#"{"method":"x","id":3,"params":{}}"#), None);
        // Ids that are not scalars, and the scan goes on past them.
        assert_eq!(id_of(r#"{"id":{"a":1,"method":2},"result":{}}"#), None);
        assert_eq!(id_of(r#"{"id":[1,2],"result":{"id":5}}"#), None);
        assert_eq!(
            id_of(r#"{"id":-1.5e3,"result":{}}"#).as_deref(),
            Some("-1.5e3")
        );
    }

    #[tokio::test]
    async fn a_banner_on_stdout_is_cut_off_and_the_messages_get_through() {
        // A banner without a newline glued to the first message, a log line, a blank
        // line and a message indented by a space.
        let input = "Starting my-server v1.2 ... {\"id\":1,\"result\":{}}\nready!\n\n {\"id\":2,\"result\":{}}\n";
        let mut r = LineLimited::new(input.as_bytes(), 1000, "t");
        let mut out = String::new();
        r.read_to_string(&mut out)
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        let ids: Vec<i64> = out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .unwrap_or_else(|e| unreachable!("{l}: {e}"))["id"]
                    .as_i64()
                    .unwrap_or(0)
            })
            .collect();
        assert_eq!(ids, [1, 2], "{out}");
        assert!(
            !out.contains("Starting") && !out.contains("ready!"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn a_line_over_the_limit_becomes_an_error_for_its_id() {
        let big = "x".repeat(100);
        let input = format!(
            "{{\"id\":1,\"result\":{{}}}}\n{{\"result\":{{\"text\":\"{big}\"}},\"id\":2}}\n{{\"id\":3,\"result\":{{}}}}\n"
        );
        let mut r = LineLimited::new(input.as_bytes(), 50, "t");
        let mut out = String::new();
        r.read_to_string(&mut out)
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| unreachable!("{l}: {e}")))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["id"], 1);
        assert_eq!(lines[1]["id"], 2);
        assert_eq!(lines[1]["error"]["code"], INTERNAL_ERROR);
        let message = lines[1]["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("over the 50-byte message limit"),
            "{message}"
        );
        assert_eq!(lines[2]["id"], 3);
    }
}
