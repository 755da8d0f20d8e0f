-- hostpipe's attachment store, version 7: MCP servers added while hostpipe runs
-- (`POST /v1/servers`), so every instance on this store, and the next start, has them.
-- `entry` is the server's `mcpServers` entry as JSON without the values of its
-- `headers` and `env`; those are in `sealed`, XChaCha20-Poly1305 ciphertext
-- (hostpipe_engine::credentials), never in plain text. Same dialect rules as 0001.

CREATE TABLE hostpipe_mcp_servers (
    name          TEXT NOT NULL PRIMARY KEY,  -- the server's name
    entry         TEXT NOT NULL,              -- JSON, no header or env values
    sealed        TEXT,                       -- 'v1.' + base64url(nonce || ciphertext || tag), or NULL
    created_at_ms BIGINT NOT NULL             -- Unix ms
);
